// attention_internal.h: what the CPU attention kernels (decode, cascade, prefill) share, and the
// switch tests use to force the portable scalar path. Not a public API.
//
// Every kernel reduces to one step: a "lane batch" of up to kLanes query vectors (pre-scaled by
// scale·log2 e, so the softmax runs in base 2) meets a tile of at most kTileTokens KV rows of one
// (block, kv head) and folds it into its running online-softmax state (m, l, unnormalized o).
// Decode puts one request's query heads of one kv head in a batch (a request's kv heads are
// walked block by block in one task); the shared-prefix pass and prefill run several batches over
// each tile while it is hot in L1, so KV is read from memory once.
// The tile step exists as portable scalar code and as one SIMD template (attention_tile_simd.h)
// instantiated for AVX2+FMA, AVX-512 and AVX-512 with BF16 dot products; ActiveTileKernels()
// picks one by the CPU's features and, between the two AVX-512 steps, by a timing probe (both
// once per process) unless a test or the FEATHER_ATTENTION_ISA variable forces one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "hw/paged_kv.h"

namespace feather::hw::attention_internal {

inline constexpr uint32_t kLanes = 8;  // one AVX2 register of scores, one lane per query vector
inline constexpr uint32_t kTileTokens = 16;

// One tile step. Plain data only: the AVX2 translation unit must not instantiate inline
// functions that other translation units also emit (the linker could keep the AVX2 copy).
struct TileArgs {
  const float* q;  // [kLanes][head_dim], scaled by scale·log2 e; lanes ≥ `lanes` are zero
  // Only for kernels with TileKernels::q_terms T > 0 (else null): [kLanes][T][head_dim / 2]
  // words, the same q as T bf16 terms (q ≈ Σ terms), each word a natural-order (even, odd)
  // pair, even element in the low half — what a bf16 dot-product instruction takes.
  const uint32_t* q_pairs;
  float* o;        // [kLanes][head_dim], unnormalized output
  float* m;        // [kLanes], running max of the base-2 scores (−inf before any token)
  float* l;        // [kLanes], running Σ 2^(score − m)
  const void* k;   // rows [tokens][head_dim] of the pool's dtype, contiguous
  const void* v;
  const int32_t* limit;  // null, or [kLanes]: lane j sees rows [0, limit[j]) of this tile
  // Tiles further along the walk: next at least 16 KiB ahead, after as far again (null: past the
  // range, or already fetched by an earlier batch on this tile). While it scores, the step
  // prefetches this tile's V and next_k; while it accumulates, next_v and after_k; each at the
  // pace of its own reads. The memory system then serves three or four streams at once, where a
  // K-then-V walk over scattered blocks gives it one (measured on the Zen 3 VM: ~1.5× the
  // bandwidth of the plain walk). The prefetches go to L2 (PREFETCHT1): on Zen 4, prefetches
  // into L1 hold its few miss buffers and left decode at ~50 % of the read probe; into L2, with
  // 16 KiB of lookahead, fp32 decode reached 75-90 % (hw/README.md).
  const void* next_k;
  const void* next_v;
  const void* after_k;
  uint32_t tokens;    // 1 .. kTileTokens
  uint32_t head_dim;  // a multiple of 8
};
using TileFn = void (*)(const TileArgs&);

// How the kernels hold q and o in the lane scratch within each whole group of G columns from
// column 0 (TileKernels::pair_group); the columns past the last whole group stay in natural
// order. InitLane and FinishLane apply and undo it.
//   kNatural: as they are (G = 0).
//   kEvenOdd: the even columns first, then the odd ones (the bf16 "pairs" load of
//     attention_tile_simd.h: a 32-bit word of K or V holds columns 2i and 2i + 1).
//   kQuads: the columns c with c mod 8 < 4 first, then the others, each set ascending (the bf16
//     values pass by dot products: a word pairs one column of two adjacent rows, and the 16-bit
//     unpacks that build those words work within 128-bit lanes, four columns at a time).
enum class ColumnOrder : uint8_t { kNatural, kEvenOdd, kQuads };
// Where natural column i of a group of `group` columns sits in the scratch under `order`.
[[nodiscard]] constexpr uint32_t ScratchColumn(ColumnOrder order, uint32_t group, uint32_t i) {
  switch (order) {
    case ColumnOrder::kEvenOdd:
      return i % 2 * (group / 2) + i / 2;
    case ColumnOrder::kQuads:
      return (i % 8 < 4 ? 0 : group / 2) + i / 8 * 4 + i % 4;
    case ColumnOrder::kNatural:
      break;
  }
  return i;
}

// fn[dtype][lanes − 1][masked]: kernels specialized for the batch width and causal masking.
// pair_group[dtype], order[dtype]: the scratch's column order (above); pair_group 0 with kNatural.
// q_terms[dtype]: 0, or the number T of bf16 terms of q the kernels read from TileArgs::q_pairs
// (InitLane writes them). bf16_math[dtype]: the kernels round q (to one bf16 term) and the
// softmax weights p to bf16 before their products, as GPU attention kernels do for bf16 models
// (attention_tile_simd.h, the AVX-512 BF16 step); false: every product has fp32 operands.
// fixed_dim[d][dtype]: the same kernels compiled for head dim kFixedHeadDims[d] (constant strides
// and trip counts), or all null; KernelsFor picks them.
inline constexpr uint32_t kFixedHeadDims[2] = {64, 128};
struct TileKernels {
  TileFn fn[2][kLanes][2];
  TileFn fixed_dim[2][2][kLanes][2];
  uint32_t pair_group[2];
  ColumnOrder order[2];
  uint32_t q_terms[2];
  bool bf16_math[2];
};

// The [lanes − 1][masked] table for a pool's dtype and head dim: fixed_dim's when it has one.
[[nodiscard]] const TileFn (*KernelsFor(const TileKernels& kernels, KvDtype dtype,
                                        uint32_t head_dim))[2];

// Each only to be called when the CPU has the features (ActiveTileKernels() checks).
[[nodiscard]] const TileKernels& ScalarTileKernels();
[[nodiscard]] const TileKernels& Avx2TileKernels();    // AVX2 + FMA
[[nodiscard]] const TileKernels& Avx512TileKernels();  // AVX-512 F + VL, AVX2, FMA
// AVX-512 F + VL + BF16: bf16 KV in bf16 math (TileKernels::bf16_math): scores and values by
// vdpbf16ps (attention_tile_simd.h); fp32 KV as AVX-512.
[[nodiscard]] const TileKernels& Avx512Bf16TileKernels();
// Tests only: the AVX-512 BF16 kernels' logic on AVX2, each vdpbf16ps replaced by the two FMAs
// that give its exact result (AVX2 + FMA suffice). Not an ISA of its own: reached only through
// SetTileKernelsForTesting.
[[nodiscard]] const TileKernels& Avx2EmulatedBf16DotTileKernels();

// The tile steps. kAuto: the widest of scalar, avx2 and avx512 the CPU supports, and avx512bf16
// over avx512 where it is the faster (below, Bf16DotPreferred).
// kAvx512Bf16 computes bf16 pools in bf16 math: it rounds q and the softmax weights to bf16
// (~2^-9 relative per product, what GPU attention kernels do for bf16 models; 1.3-1.5x the
// avx512 step's speed in cache on Zen 4, hw/README.md) where the others are fp32-exact; its fp32
// kernels are avx512's. FEATHER_ATTENTION_ISA=avx512 keeps bf16 pools in fp32 math.
enum class AttentionIsa : uint8_t { kAuto, kScalar, kAvx2, kAvx512, kAvx512Bf16 };
// "auto", "scalar", "avx2", "avx512", "avx512bf16": the name in benchmark labels, profiles and the
// variable.
[[nodiscard]] const char* AttentionIsaName(AttentionIsa isa);
// Whether this CPU can run `isa`'s tile step (kAuto and kScalar: always).
[[nodiscard]] bool CpuSupports(AttentionIsa isa);
// What the CPU lacks for `isa` (e.g. "avx512vl"), or "" when it has everything.
[[nodiscard]] const char* MissingFeature(AttentionIsa isa);
// Forces a tile step for the process (tests, benchmarks): an ISA the CPU lacks is refused
// (returns false, nothing changes); kAuto returns to the automatic choice. The environment
// variable FEATHER_ATTENTION_ISA (one of the names above), read once at the first kernel call,
// does the same for a whole run; an unknown name or an ISA the CPU lacks is a fatal error there.
// Not thread-safe against running kernels.
bool SetAttentionIsaForTesting(AttentionIsa isa);
[[nodiscard]] AttentionIsa ActiveAttentionIsa();  // never kAuto
// kAuto on a CPU with AVX-512 BF16 takes kAvx512Bf16 unless the AVX-512 pairs step runs bf16
// pools more than kBf16PathMargin faster in cache (timed once per process at the first call:
// both steps over 512 tokens in L2, the fastest of 7 alternating passes each). Which is faster
// depends on the microarchitecture, not on the ISA: vdpbf16ps wins on Zen 4 and loses on Intel
// Xeons with two 512-bit FMA units (hw/README.md, "bf16 by measurement"). The margin keeps the
// dot step where the two are within noise. FEATHER_ATTENTION_ISA names one outright.
inline constexpr double kBf16PathMargin = 0.05;
// The rule on the two probe times: true (keep the dot step) unless pairs·(1 + margin) < dot.
[[nodiscard]] bool Bf16DotPreferred(double dot_seconds, double pairs_seconds);
// The probe's times (seconds per pass of each step; zeros and dot_preferred false on a CPU
// without AVX-512 BF16, where it does not run), measured once per process at the first call.
struct Bf16PathTimes {
  double dot_seconds = 0;
  double pairs_seconds = 0;
  bool dot_preferred = false;
};
[[nodiscard]] const Bf16PathTimes& Bf16PathProbe();
// The kernels of ActiveAttentionIsa(), or those SetTileKernelsForTesting installed.
[[nodiscard]] const TileKernels& ActiveTileKernels();
// Tests only: makes ActiveTileKernels() return `kernels` (null: back to the ISA's own), whose
// features the caller has checked. Not thread-safe against running kernels.
void SetTileKernelsForTesting(const TileKernels* kernels);

// Per-thread state of several lane batches, sized on first use and only ever grown, so the hot
// path does not allocate. Batch b holds q, o ([kLanes][head_dim] each, in the column order of the
// kernels' pair_group for the pool's dtype), m, l, the exclusive causal limits (absolute token
// positions) of its lanes and, for kernels with q_terms, q's bf16 pairs (TileArgs::q_pairs).
// 64-byte aligned batches.
class LaneScratch {
 public:
  void Reserve(uint32_t batches, uint32_t head_dim, const TileKernels& kernels, KvDtype dtype);
  [[nodiscard]] uint32_t PairGroup() const { return pair_group_; }
  [[nodiscard]] ColumnOrder Order() const { return order_; }
  [[nodiscard]] uint32_t QTerms() const { return q_terms_; }
  // [kLanes][QTerms()][head_dim / 2] words; null when QTerms() is 0.
  [[nodiscard]] uint32_t* QPairs(uint32_t b) {
    return q_terms_ == 0 ? nullptr : reinterpret_cast<uint32_t*>(L(b) + kLanes);
  }
  [[nodiscard]] float* Q(uint32_t b) { return Base(b); }
  [[nodiscard]] float* O(uint32_t b) { return Base(b) + size_t{kLanes} * head_dim_; }
  [[nodiscard]] float* M(uint32_t b) { return Base(b) + 2 * size_t{kLanes} * head_dim_; }
  [[nodiscard]] float* L(uint32_t b) { return M(b) + kLanes; }
  [[nodiscard]] int32_t* Limit(uint32_t b) { return limits_.data() + size_t{b} * kLanes; }
  [[nodiscard]] uint32_t& Lanes(uint32_t b) { return lanes_[b]; }

 private:
  [[nodiscard]] float* Base(uint32_t b) { return aligned_ + size_t{b} * stride_; }
  std::vector<float> storage_;
  std::vector<int32_t> limits_;
  std::vector<uint32_t> lanes_;
  float* aligned_ = nullptr;
  size_t stride_ = 0;
  uint32_t head_dim_ = 0;
  uint32_t pair_group_ = 0;
  ColumnOrder order_ = ColumnOrder::kNatural;
  uint32_t q_terms_ = 0;
};
[[nodiscard]] LaneScratch& ThreadLaneScratch();  // thread_local

// Starts lane `lane` of batch b: copies q·scale·log2 e (in the scratch's column order, and as
// QTerms() bf16 pairs when the kernels take them), clears o, m = −inf, l = 0.
void InitLane(LaneScratch& scratch, uint32_t b, uint32_t lane, const float* q, float scale,
              uint32_t head_dim);
// Whether `kernels` compute pools of `dtype` in bf16 math (TileKernels::bf16_math).
[[nodiscard]] inline bool UsesBf16Math(const TileKernels& kernels, KvDtype dtype) {
  return kernels.bf16_math[dtype == KvDtype::kFp32 ? 0 : 1];
}
// The query values `kernels` see for a pool of `dtype` at `scale`, in place: unchanged, or where
// they use bf16 math each value whose q·scale·log2 e is the bf16 that InitLane rounds it to. Run on
// the result, an fp32-exact reference scores what the kernels score (tests and benchmarks
// compare them so).
void RoundQueriesAsKernelsSee(const TileKernels& kernels, KvDtype dtype, float* q, size_t count,
                              float scale);
// Zeroes the q of lanes [from, kLanes) of batch b (padding lanes of a partial batch).
void ClearLanesFrom(LaneScratch& scratch, uint32_t b, uint32_t from, uint32_t head_dim);
// Writes lane `lane`'s normalized output (natural column order) and natural-log lse (−inf and
// zeros when it saw nothing).
void FinishLane(LaneScratch& scratch, uint32_t b, uint32_t lane, uint32_t head_dim, float* out,
                float* lse);

// The KV tokens [begin, end) of kv heads [kv_head, kv_head + kv_heads) of one request, through
// its block table.
struct KvRange {
  const void* k_pool;
  const void* v_pool;
  const PagedKvLayout* layout;
  const uint32_t* block_table;
  uint32_t kv_head;
  uint32_t kv_heads;
  uint32_t begin;
  uint32_t end;
};
// Folds the range into the scratch's batches, tile by tile: batches [h·per_head, (h+1)·per_head)
// belong to kv head kv_head + h, and each runs on the tile while it is in L1. The tiles of one
// block's kv heads are adjacent in the pool, so several heads walk it as one longer contiguous
// run. The first batch on a tile prefetches the following tiles (their addresses come from the
// block table, which no hardware prefetcher follows). causal: lane j sees only tokens < its Limit.
void RunBatchesOverRange(const TileKernels& kernels, LaneScratch& scratch,
                         uint32_t batches_per_head, const KvRange& range, bool causal);

// Merges state b into state a for one head (the formula of cascade_attention.h).
void MergeState(float* out_a, float* lse_a, const float* out_b, float lse_b, uint32_t head_dim);

// Combines n normalized partial states (outs [n][stride_out..], lses) of one head into out, lse.
void CombineStates(const float* outs, size_t out_stride, const float* lses, size_t lse_stride,
                   uint32_t n, uint32_t head_dim, float* out, float* lse);

}  // namespace feather::hw::attention_internal
