// decode_attention_tile.cc: the machinery the CPU attention kernels share (attention_internal.h):
// the once-per-process choice of the tile step (AVX-512 BF16, AVX-512, AVX2+FMA or scalar), the
// per-thread lane scratch and its column order, the walk over a paged KV range with prefetch, and
// the log-sum-exp merges.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <string_view>
#include <vector>

#include "hw/attention_internal.h"
#include "hw/decode_attention.h"
#include "hw/isa_variable.h"
#include "hw/paged_kv.h"

namespace feather::hw::attention_internal {
namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
constexpr float kLog2E = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
std::atomic<size_t> decode_prefetch_bytes{kDefaultDecodePrefetchBytes};
std::atomic<AttentionIsa> forced_isa{AttentionIsa::kAuto};
std::atomic<const TileKernels*> forced_kernels{nullptr};

constexpr AttentionIsa kAllIsas[] = {AttentionIsa::kAuto, AttentionIsa::kScalar,
                                     AttentionIsa::kAvx2, AttentionIsa::kAvx512,
                                     AttentionIsa::kAvx512Bf16};

// The CPU features each tile step needs, checked in order; the first one missing is named.
struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false;
  bool avx512vl = false;
  bool avx512bw = false;
  bool avx512bf16 = false;
};

const CpuFeatures& Features() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2");
    f.fma = __builtin_cpu_supports("fma");
    f.avx512f = __builtin_cpu_supports("avx512f");
    f.avx512vl = __builtin_cpu_supports("avx512vl");
    f.avx512bw = __builtin_cpu_supports("avx512bw");
    f.avx512bf16 = __builtin_cpu_supports("avx512bf16");
#endif
    return f;
  }();
  return features;
}

// FEATHER_ATTENTION_ISA, read once: kAuto when unset or empty; exits with status 2 on a bad value
// (hw/isa_variable.h). kAllIsas lists the enum in value order, so an index is the value.
AttentionIsa IsaFromEnvironment() {
  static const AttentionIsa isa = [] {
    std::string_view names[std::size(kAllIsas)];
    for (size_t i = 0; i < std::size(kAllIsas); ++i) names[i] = AttentionIsaName(kAllIsas[i]);
    return kAllIsas[ChoiceFromVariable("FEATHER_ATTENTION_ISA", names, 0, [](size_t i) {
      return std::string_view(MissingFeature(kAllIsas[i]));
    })];
  }();
  return isa;
}

// Narrows a batch's tile step to the rows some lane may see; returns false when none sees any.
bool ApplyCausalLimits(LaneScratch& scratch, uint32_t b, uint32_t tile_start, TileArgs& args,
                       int32_t (&relative)[kLanes]) {
  const int32_t* limit = scratch.Limit(b);
  const uint32_t lanes = scratch.Lanes(b);
  int32_t max_rel = std::numeric_limits<int32_t>::min();
  int32_t min_rel = std::numeric_limits<int32_t>::max();
  for (uint32_t j = 0; j < kLanes; ++j) {
    relative[j] = j < lanes ? limit[j] - static_cast<int32_t>(tile_start) : 0;
    if (j < lanes) {
      max_rel = std::max(max_rel, relative[j]);
      min_rel = std::min(min_rel, relative[j]);
    }
  }
  if (max_rel <= 0) return false;
  args.tokens = std::min(args.tokens, static_cast<uint32_t>(max_rel));
  args.limit = min_rel >= static_cast<int32_t>(args.tokens) ? nullptr : relative;
  return true;
}

// Where a tile's rows are, and those of the tiles to prefetch (TileArgs::next_k; null past
// the range).
struct TilePointers {
  const void* k;
  const void* v;
  const void* next_k;
  const void* next_v;
  const void* after_k;
};

// One tile of `tokens` rows starting at token `tile_start`, batches [first, first + count) in
// turn; the first batch that runs prefetches the next tiles, the others find this one in L1.
void RunTile(const TileFn (*fns)[2], LaneScratch& scratch, uint32_t first, uint32_t count,
             const TilePointers& tile, uint32_t tile_start, uint32_t tokens, uint32_t head_dim,
             bool causal) {
  bool prefetched = false;
  for (uint32_t b = first; b < first + count; ++b) {
    TileArgs args{scratch.Q(b),
                  scratch.QPairs(b),
                  scratch.O(b),
                  scratch.M(b),
                  scratch.L(b),
                  tile.k,
                  tile.v,
                  nullptr,
                  prefetched ? nullptr : tile.next_k,
                  prefetched ? nullptr : tile.next_v,
                  prefetched ? nullptr : tile.after_k,
                  tokens,
                  head_dim};
    int32_t relative[kLanes];
    if (causal && !ApplyCausalLimits(scratch, b, tile_start, args, relative)) continue;
    fns[scratch.Lanes(b) - 1][args.limit != nullptr ? 1 : 0](args);
    prefetched = true;
  }
}

// One pass of `kernels`' bf16 tile step over a range that stays in L2 (kProbeTokens tokens of
// one kv head at head dim 128, 4 query heads: Llama-3-8B's group), timed: the step's own speed,
// the same measurement as BM_DecodeInCache. The caller alternates passes of the two paths, so
// both see the same machine, and keeps each one's fastest.
constexpr uint32_t kProbeTokens = 512;  // K and V: 256 KiB in bf16, inside Zen 4's 1 MiB L2
constexpr uint32_t kProbeDim = 128;
constexpr uint32_t kProbeHeads = 4;

struct Bf16Probe {
  PagedKvLayout layout{kProbeTokens / 16, 1, 16, kProbeDim, KvDtype::kBf16};
  std::vector<uint16_t> k, v;
  std::vector<uint32_t> table;
  std::vector<float> q;
  Bf16Probe()
      : k(layout.BlockElems() * layout.num_blocks), v(k.size()), q(kProbeHeads * kProbeDim) {
    uint32_t state = 12345;  // any values: the step's time does not depend on them
    auto next = [&state] {
      state = state * 1664525u + 1013904223u;
      return static_cast<float>(state >> 8) / 16777216.0f - 0.5f;
    };
    for (uint16_t& x : k) x = FloatToBf16(next());
    for (uint16_t& x : v) x = FloatToBf16(next());
    for (float& x : q) x = next();
    for (uint32_t b = 0; b < layout.num_blocks; ++b) table.push_back(b);
  }
  double Seconds(const TileKernels& kernels, LaneScratch& scratch) const {
    scratch.Reserve(1, kProbeDim, kernels, KvDtype::kBf16);
    scratch.Lanes(0) = kProbeHeads;
    for (uint32_t j = 0; j < kProbeHeads; ++j) {
      InitLane(scratch, 0, j, q.data() + size_t{j} * kProbeDim, 0.088f, kProbeDim);
    }
    ClearLanesFrom(scratch, 0, kProbeHeads, kProbeDim);
    const KvRange range{k.data(), v.data(), &layout, table.data(), 0, 1, 0, kProbeTokens};
    const auto start = std::chrono::steady_clock::now();
    RunBatchesOverRange(kernels, scratch, 1, range, /*causal=*/false);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
};

}  // namespace

// Whether the bf16 dot-product step (vdpbf16ps) beats the AVX-512 pairs step on this CPU, by
// the in-cache probe above (the first kernel call pays for it: ~1 ms). Measured: on Zen 4 the dot
// step is 1.3-1.5x the pairs step in cache (vdpbf16ps does 32 products per instruction where a
// double-pumped 512-bit FMA does 16); on an Intel Xeon (family 6 model 207) with two 512-bit FMA
// units the pairs step is 1.07-1.14x the dot step (its V pass needs shuffles, which Intel runs on
// one port), and from memory 0.82 against 0.71 of the read probe (hw/README.md, "bf16 by
// measurement").
const Bf16PathTimes& Bf16PathProbe() {
  static const Bf16PathTimes times = [] {
    Bf16PathTimes t;
    if (!CpuSupports(AttentionIsa::kAvx512Bf16)) return t;
    const Bf16Probe probe;
    LaneScratch scratch;
    constexpr int kRounds = 7;
    t.dot_seconds = t.pairs_seconds = 1e30;
    for (int round = 0; round < kRounds; ++round) {  // the first round warms the caches
      t.dot_seconds = std::min(t.dot_seconds, probe.Seconds(Avx512Bf16TileKernels(), scratch));
      t.pairs_seconds = std::min(t.pairs_seconds, probe.Seconds(Avx512TileKernels(), scratch));
    }
    t.dot_preferred = Bf16DotPreferred(t.dot_seconds, t.pairs_seconds);
    return t;
  }();
  return times;
}

bool Bf16DotPreferred(double dot_seconds, double pairs_seconds) {
  return !(pairs_seconds * (1 + kBf16PathMargin) < dot_seconds);
}

const char* AttentionIsaName(AttentionIsa isa) {
  switch (isa) {
    case AttentionIsa::kAuto:
      return "auto";
    case AttentionIsa::kScalar:
      return "scalar";
    case AttentionIsa::kAvx2:
      return "avx2";
    case AttentionIsa::kAvx512:
      return "avx512";
    case AttentionIsa::kAvx512Bf16:
      return "avx512bf16";
  }
  return "?";
}

const char* MissingFeature(AttentionIsa isa) {
  const CpuFeatures& f = Features();
  const bool avx512 = isa == AttentionIsa::kAvx512 || isa == AttentionIsa::kAvx512Bf16;
  if (isa == AttentionIsa::kAvx2 || avx512) {
    if (!f.avx2) return "avx2";
    if (!f.fma) return "fma";
  }
  if (avx512 && !f.avx512f) return "avx512f";
  if (avx512 && !f.avx512vl) return "avx512vl";
  if (isa == AttentionIsa::kAvx512Bf16 && !f.avx512bw) return "avx512bw";
  if (isa == AttentionIsa::kAvx512Bf16 && !f.avx512bf16) return "avx512bf16";
  return "";
}

bool CpuSupports(AttentionIsa isa) { return *MissingFeature(isa) == '\0'; }

bool SetAttentionIsaForTesting(AttentionIsa isa) {
  if (!CpuSupports(isa)) return false;
  forced_isa.store(isa);
  return true;
}

AttentionIsa ActiveAttentionIsa() {
  AttentionIsa chosen = forced_isa.load(std::memory_order_relaxed);
  if (chosen == AttentionIsa::kAuto) chosen = IsaFromEnvironment();
  if (chosen != AttentionIsa::kAuto) return chosen;
  // kAvx512Bf16 differs from kAvx512 only on bf16 pools, which it computes in bf16 math
  // (attention_internal.h); it is chosen where it is the faster of the two (Bf16PathProbe).
  if (CpuSupports(AttentionIsa::kAvx512Bf16)) {
    return Bf16PathProbe().dot_preferred ? AttentionIsa::kAvx512Bf16 : AttentionIsa::kAvx512;
  }
  if (CpuSupports(AttentionIsa::kAvx512)) return AttentionIsa::kAvx512;
  if (CpuSupports(AttentionIsa::kAvx2)) return AttentionIsa::kAvx2;
  return AttentionIsa::kScalar;
}

const TileFn (*KernelsFor(const TileKernels& kernels, KvDtype dtype, uint32_t head_dim))[2] {
  const uint32_t table = dtype == KvDtype::kFp32 ? 0 : 1;
  for (uint32_t d = 0; d < 2; ++d) {
    if (head_dim == kFixedHeadDims[d] && kernels.fixed_dim[d][table][0][0] != nullptr) {
      return kernels.fixed_dim[d][table];
    }
  }
  return kernels.fn[table];
}

void SetTileKernelsForTesting(const TileKernels* kernels) { forced_kernels.store(kernels); }

const TileKernels& ActiveTileKernels() {
  if (const TileKernels* forced = forced_kernels.load(std::memory_order_relaxed)) return *forced;
  switch (ActiveAttentionIsa()) {
    case AttentionIsa::kAvx512Bf16:
      return Avx512Bf16TileKernels();
    case AttentionIsa::kAvx512:
      return Avx512TileKernels();
    case AttentionIsa::kAvx2:
      return Avx2TileKernels();
    default:
      return ScalarTileKernels();
  }
}

void LaneScratch::Reserve(uint32_t batches, uint32_t head_dim, const TileKernels& kernels,
                          KvDtype dtype) {
  constexpr size_t kAlignFloats = 16;  // 64 bytes: aligned AVX2 and AVX-512 loads of q and o
  const uint32_t table = dtype == KvDtype::kFp32 ? 0 : 1;
  q_terms_ = kernels.q_terms[table];
  // A multiple of 16 floats (head_dim is a multiple of 8), so every batch stays 64-byte aligned:
  // q, o, m, l, then q's bf16 pairs (kLanes · q_terms · head_dim / 2 words, a multiple of 16).
  stride_ = 2 * size_t{kLanes} * head_dim + 2 * kLanes + size_t{kLanes} * q_terms_ * head_dim / 2;
  head_dim_ = head_dim;
  pair_group_ = kernels.pair_group[table];
  order_ = kernels.order[table];
  const size_t needed = size_t{batches} * stride_ + kAlignFloats;
  if (storage_.size() < needed) storage_.resize(needed);
  if (limits_.size() < size_t{batches} * kLanes) limits_.resize(size_t{batches} * kLanes);
  if (lanes_.size() < batches) lanes_.resize(batches);
  const auto address = reinterpret_cast<uintptr_t>(storage_.data());
  const size_t misalign = (address / sizeof(float)) % kAlignFloats;
  aligned_ = storage_.data() + (misalign == 0 ? 0 : kAlignFloats - misalign);
}

LaneScratch& ThreadLaneScratch() {
  thread_local LaneScratch scratch;
  return scratch;
}

void InitLane(LaneScratch& scratch, uint32_t b, uint32_t lane, const float* q, float scale,
              uint32_t head_dim) {
  float* q_lane = scratch.Q(b) + size_t{lane} * head_dim;
  const float factor = scale * kLog2E;
  const uint32_t group = scratch.PairGroup();
  const uint32_t paired = group == 0 ? 0 : head_dim / group * group;
  const ColumnOrder order = scratch.Order();
  for (uint32_t c = 0; c < paired; c += group) {  // the scratch's order (TileKernels::order)
    for (uint32_t i = 0; i < group; ++i)
      q_lane[c + ScratchColumn(order, group, i)] = q[c + i] * factor;
  }
  for (uint32_t d = paired; d < head_dim; ++d) q_lane[d] = q[d] * factor;
  if (const uint32_t terms = scratch.QTerms(); terms > 0) {
    // Each term rounds (to nearest even) what the earlier ones left: three terms would carry the
    // 24 bits of an fp32 q; the kernels of bf16 math take one, q in bf16.
    uint32_t* pairs = scratch.QPairs(b) + size_t{lane} * terms * (head_dim / 2);
    for (uint32_t i = 0; i < head_dim / 2; ++i) {
      float rest[2] = {q[2 * i] * factor, q[2 * i + 1] * factor};
      for (uint32_t t = 0; t < terms; ++t) {
        const uint16_t even = FloatToBf16(rest[0]);
        const uint16_t odd = FloatToBf16(rest[1]);
        pairs[size_t{t} * (head_dim / 2) + i] = uint32_t{even} | (uint32_t{odd} << 16);
        rest[0] -= Bf16ToFloat(even);
        rest[1] -= Bf16ToFloat(odd);
      }
    }
  }
  std::fill_n(scratch.O(b) + size_t{lane} * head_dim, head_dim, 0.0f);
  scratch.M(b)[lane] = kMinusInf;
  scratch.L(b)[lane] = 0;
}

void RoundQueriesAsKernelsSee(const TileKernels& kernels, KvDtype dtype, float* q, size_t count,
                              float scale) {
  if (!UsesBf16Math(kernels, dtype)) return;
  const float factor = scale * kLog2E;  // as InitLane
  for (size_t i = 0; i < count; ++i) q[i] = Bf16ToFloat(FloatToBf16(q[i] * factor)) / factor;
}

void ClearLanesFrom(LaneScratch& scratch, uint32_t b, uint32_t from, uint32_t head_dim) {
  for (uint32_t lane = from; lane < kLanes; ++lane) {
    std::fill_n(scratch.Q(b) + size_t{lane} * head_dim, head_dim, 0.0f);
    std::fill_n(scratch.O(b) + size_t{lane} * head_dim, head_dim, 0.0f);
    scratch.M(b)[lane] = kMinusInf;
    scratch.L(b)[lane] = 0;
    scratch.Limit(b)[lane] = 0;
    if (const uint32_t terms = scratch.QTerms(); terms > 0) {
      std::fill_n(scratch.QPairs(b) + size_t{lane} * terms * (head_dim / 2),
                  size_t{terms} * (head_dim / 2), 0u);
    }
  }
}

void FinishLane(LaneScratch& scratch, uint32_t b, uint32_t lane, uint32_t head_dim, float* out,
                float* lse) {
  const float sum = scratch.L(b)[lane];
  const float* o = scratch.O(b) + size_t{lane} * head_dim;
  if (!(sum > 0)) {
    std::fill_n(out, head_dim, 0.0f);
    if (lse != nullptr) *lse = kMinusInf;
    return;
  }
  const float inverse = 1.0f / sum;
  const uint32_t group = scratch.PairGroup();
  const uint32_t paired = group == 0 ? 0 : head_dim / group * group;
  const ColumnOrder order = scratch.Order();
  for (uint32_t c = 0; c < paired; c += group) {  // undoes InitLane's order
    for (uint32_t i = 0; i < group; ++i)
      out[c + i] = o[c + ScratchColumn(order, group, i)] * inverse;
  }
  for (uint32_t d = paired; d < head_dim; ++d) out[d] = o[d] * inverse;
  if (lse != nullptr) *lse = (scratch.M(b)[lane] + std::log2(sum)) * kLn2;
}

void RunBatchesOverRange(const TileKernels& kernels, LaneScratch& scratch,
                         uint32_t batches_per_head, const KvRange& range, bool causal) {
  const PagedKvLayout& layout = *range.layout;
  const size_t elem_bytes = KvDtypeBytes(layout.dtype);
  const uint32_t block_tokens = layout.block_tokens;
  const auto* k_pool = static_cast<const char*>(range.k_pool);
  const auto* v_pool = static_cast<const char*>(range.v_pool);
  const TileFn(*fns)[2] = KernelsFor(kernels, layout.dtype, layout.head_dim);
  // Tiles are visited as (first token, head offset h) in token-then-head order.
  struct Step {
    uint32_t pos;
    uint32_t h;
  };
  auto offset_of = [&](Step step) {
    const uint32_t block = range.block_table[step.pos / block_tokens];
    return layout.Offset(block, range.kv_head + step.h, step.pos % block_tokens) * elem_bytes;
  };
  // The tile after `step` (tiles never straddle blocks); pos == end past the last one.
  auto following = [&](Step step) {
    if (step.h + 1 < range.kv_heads) return Step{step.pos, step.h + 1};
    const uint32_t block_end = (step.pos / block_tokens + 1) * block_tokens;
    return Step{std::min({range.end, block_end, step.pos + kTileTokens}), 0};
  };
  auto k_at = [&](Step s) { return s.pos < range.end ? k_pool + offset_of(s) : nullptr; };
  auto v_at = [&](Step s) { return s.pos < range.end ? v_pool + offset_of(s) : nullptr; };
  // Prefetch `hops` tiles ahead, at least DecodePrefetchBytes() (decode_attention.h): on Zen 4 a
  // smaller window (bf16, short head dims) kept too few lines in flight to cover the memory
  // latency (fp32 decode read 26.9 / 22.7 GB/s at 4 KiB, 31.8 / 24.3 at 8, 33.2 / 32.6 at 16 and
  // 25.4 / 32.0 at 32; two alternated sweeps, two threads), while on Zen 5 one tile ahead read
  // fastest; the lines land in L2, which holds 512 KiB-1 MiB.
  const size_t lookahead = decode_prefetch_bytes.load(std::memory_order_relaxed);
  const size_t tile_bytes =
      size_t{std::min(block_tokens, kTileTokens)} * layout.head_dim * elem_bytes;
  const uint32_t hops =
      static_cast<uint32_t>(std::max<size_t>(1, (lookahead + tile_bytes - 1) / tile_bytes));
  auto skip = [&](Step s) {
    for (uint32_t i = 0; i < hops && s.pos < range.end; ++i) s = following(s);
    return s;
  };
  Step next = skip(Step{range.begin, 0});
  Step after = skip(next);
  for (Step step{range.begin, 0}; step.pos < range.end;) {
    const TilePointers tile{k_at(step), v_at(step), k_at(next), v_at(next), k_at(after)};
    const uint32_t tokens = std::min({range.end, (step.pos / block_tokens + 1) * block_tokens,
                                      step.pos + kTileTokens}) -
                            step.pos;
    RunTile(fns, scratch, step.h * batches_per_head, batches_per_head, tile, step.pos, tokens,
            layout.head_dim, causal);
    step = following(step);
    next = following(next);
    after = following(after);
  }
}

void MergeState(float* out_a, float* lse_a, const float* out_b, float lse_b, uint32_t head_dim) {
  if (lse_b == kMinusInf) return;
  if (*lse_a == kMinusInf) {
    std::memcpy(out_a, out_b, head_dim * sizeof(float));
    *lse_a = lse_b;
    return;
  }
  const float m = std::max(*lse_a, lse_b);
  const float weight_a = std::exp(*lse_a - m);
  const float weight_b = std::exp(lse_b - m);
  const float inverse = 1.0f / (weight_a + weight_b);
  for (uint32_t d = 0; d < head_dim; ++d) {
    out_a[d] = (weight_a * out_a[d] + weight_b * out_b[d]) * inverse;
  }
  *lse_a = m + std::log(weight_a + weight_b);
}

void CombineStates(const float* outs, size_t out_stride, const float* lses, size_t lse_stride,
                   uint32_t n, uint32_t head_dim, float* out, float* lse) {
  float m = kMinusInf;
  for (uint32_t i = 0; i < n; ++i) m = std::max(m, lses[i * lse_stride]);
  std::fill_n(out, head_dim, 0.0f);
  if (m == kMinusInf) {
    if (lse != nullptr) *lse = kMinusInf;
    return;
  }
  float total = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const float weight = std::exp(lses[i * lse_stride] - m);
    if (weight == 0) continue;
    total += weight;
    const float* part = outs + i * out_stride;
    for (uint32_t d = 0; d < head_dim; ++d) out[d] += weight * part[d];
  }
  const float inverse = 1.0f / total;
  for (uint32_t d = 0; d < head_dim; ++d) out[d] *= inverse;
  if (lse != nullptr) *lse = m + std::log(total);
}

}  // namespace feather::hw::attention_internal

namespace feather::hw {

void SetDecodePrefetchBytes(size_t bytes) {
  attention_internal::decode_prefetch_bytes.store(bytes == 0 ? kDefaultDecodePrefetchBytes : bytes,
                                                  std::memory_order_relaxed);
}

size_t DecodePrefetchBytes() {
  return attention_internal::decode_prefetch_bytes.load(std::memory_order_relaxed);
}

}  // namespace feather::hw
