// cpu_engine.cc: CpuEngine (see cpu_engine.h) — weights, KV pools, and one forward step per
// Execute through the hw/ kernels, timed term by term.
//
// Activation rows. Every new token of the step is one row of the activation matrices. Rows are
// ordered decode requests first (plan order), then the prefill chunks (plan order), so that the
// decode requests' queries and outputs are the contiguous [B][heads][head_dim] arrays the decode
// kernels index by request, and each chunk is a contiguous run of rows for PrefillAttention.
// The LM head reads one sampled row per request, gathered in plan order.
//
// Weights (fp32 whatever model.dtype_bytes says; only the KV pools follow the model's dtype):
// QKV fused as one [hidden][(heads + 2·kv_heads)·head_dim] matrix, gate and up fused as one
// [hidden][2·intermediate] matrix, so each is one GEMM. Values are uniform in ±sqrt(3/fan_in)
// (variance 1/fan_in: activations stay O(1) through the layers), from a counter-based hash of
// (seed, matrix, index) so they do not depend on the thread count; RMSNorm weights are 1. The
// embedding is [vocab][hidden] with unit-variance rows, and the LM head [hidden][vocab]; with
// tied embeddings there is only the LM head matrix and a token's embedding is its column.
//
// Term boundaries (cpu_engine.h): kGemm = per layer [RMSNorm → QKV GEMM → RoPE and the q/k/v
// split] and [O GEMM → residual → RMSNorm → gate/up GEMM → SiLU·up → down GEMM → residual], and
// [final RMSNorm of the sampled rows → LM head → argmax]. kDecodeAttention = the decode
// requests' KV appends and plain decode attention, or cascade's suffix pass; kCascadePrefix =
// cascade's shared-prefix pass and its merge; kPrefillAttention = the chunks' KV appends and
// prefill attention. kOverhead = the rest (plan bookkeeping, embedding gather, the denormal
// switch), as total − Σ others.
#include "hw/cpu_engine.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "base/check.h"
#include "base/cpus.h"
#include "base/splitmix64.h"
#include "hw/cascade_attention.h"
#include "hw/decode_attention.h"
#include "hw/plan_layout.h"
#include "hw/prefill_attention.h"

namespace feather::hw {
namespace {

constexpr size_t kAlignBytes = 64;
constexpr float kRmsEps = 1e-5F;
constexpr double kRopeTheta = 10000.0;
// Elementwise loops smaller than this run on the calling thread (an OpenMP fork costs µs).
constexpr size_t kParallelMinElems = 16384;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The token at `position` of request `id`: a cheap hash, so the embedding is a real row gather.
uint32_t TokenOf(RequestId id, uint32_t position, uint32_t vocab) {
  return static_cast<uint32_t>(SplitMix64Hash((uint64_t{id} << 32) | position) % vocab);
}

size_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<size_t>(pages) * static_cast<size_t>(page);
}

std::string Mib(double bytes) {
  return std::to_string(static_cast<uint64_t>(std::llround(bytes / (1024.0 * 1024.0)))) + " MiB";
}

// A 64-byte aligned array that only grows (Execute's buffers: no allocation once grown).
template <typename T>
class AlignedArray {
 public:
  AlignedArray() = default;
  ~AlignedArray() { std::free(data_); }
  AlignedArray(const AlignedArray&) = delete;
  AlignedArray& operator=(const AlignedArray&) = delete;
  AlignedArray(AlignedArray&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), capacity_(std::exchange(other.capacity_, 0)) {}
  AlignedArray& operator=(AlignedArray&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(capacity_, other.capacity_);
    return *this;
  }

  // Makes room for n elements (contents are not kept when it grows). Returns the data.
  T* Reserve(size_t n) {
    if (n > capacity_) {
      std::free(data_);
      const size_t bytes =
          (std::max<size_t>(n, 1) * sizeof(T) + kAlignBytes - 1) / kAlignBytes * kAlignBytes;
      data_ = static_cast<T*>(std::aligned_alloc(kAlignBytes, bytes));
      if (data_ == nullptr) throw std::bad_alloc();
      capacity_ = n;
    }
    return data_;
  }
  [[nodiscard]] T* data() const { return data_; }
  [[nodiscard]] size_t capacity() const { return capacity_; }

 private:
  T* data_ = nullptr;
  size_t capacity_ = 0;
};

// Fills p[0, n) with uniform values in ±bound from a counter-based hash (thread-count
// independent), in parallel; the writes are also the first touch of the pages.
void FillUniform(float* p, size_t n, float bound, uint64_t seed, uint64_t tag, int threads) {
  const uint64_t key = SplitMix64Hash(seed ^ SplitMix64Hash(tag));
  const auto count = static_cast<int64_t>(n);
#pragma omp parallel for num_threads(threads) schedule(static) if (n > kParallelMinElems)
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t bits = SplitMix64Hash(key + static_cast<uint64_t>(i));
    const float unit = static_cast<float>(bits >> 40) * 0x1.0p-24F;  // [0, 1)
    p[i] = (2.0F * unit - 1.0F) * bound;
  }
}

void FillConstant(float* p, size_t n, float value) { std::fill_n(p, n, value); }

// Zeroes bytes in parallel, touching every page now rather than inside a timed step.
void ZeroTouch(void* p, size_t bytes, int threads) {
  constexpr size_t kChunk = size_t{1} << 21;
  const auto chunks = static_cast<int64_t>((bytes + kChunk - 1) / kChunk);
  auto* base = static_cast<unsigned char*>(p);
#pragma omp parallel for num_threads(threads) schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t begin = static_cast<size_t>(c) * kChunk;
    std::memset(base + begin, 0, std::min(kChunk, bytes - begin));
  }
}

// y[r] = x[r] / rms(x[r]) · w, rows of `width`.
void RmsNorm(const float* x, const float* w, float* y, uint32_t rows, uint32_t width, int threads) {
  const bool parallel = size_t{rows} * width > kParallelMinElems;
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
  for (int64_t r = 0; r < int64_t{rows}; ++r) {
    const float* in = x + static_cast<size_t>(r) * width;
    float* out = y + static_cast<size_t>(r) * width;
    float sum = 0;
    for (uint32_t j = 0; j < width; ++j) sum += in[j] * in[j];
    const float inv = 1.0F / std::sqrt(sum / static_cast<float>(width) + kRmsEps);
    for (uint32_t j = 0; j < width; ++j) out[j] = in[j] * inv * w[j];
  }
}

// x += y, n elements.
void AddInPlace(float* x, const float* y, size_t n, int threads) {
  const auto count = static_cast<int64_t>(n);
#pragma omp parallel for num_threads(threads) schedule(static) if (n > kParallelMinElems)
  for (int64_t i = 0; i < count; ++i) x[i] += y[i];
}

// act[r][j] = silu(gate[r][j]) · up[r][j]; gate_up rows are [gate | up].
void SiluMul(const float* gate_up, float* act, uint32_t rows, uint32_t inter, int threads) {
  const bool parallel = size_t{rows} * inter > kParallelMinElems;
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
  for (int64_t r = 0; r < int64_t{rows}; ++r) {
    const float* gate = gate_up + static_cast<size_t>(r) * 2 * inter;
    const float* up = gate + inter;
    float* out = act + static_cast<size_t>(r) * inter;
    for (uint32_t j = 0; j < inter; ++j) {
      const float g = gate[j];
      out[j] = g / (1.0F + std::exp(-g)) * up[j];
    }
  }
}

// Rotate-half RoPE of one head vector in place (Llama / Hugging Face convention).
void RotateHalf(float* v, const float* cos, const float* sin, uint32_t half) {
  for (uint32_t i = 0; i < half; ++i) {
    const float a = v[i];
    const float b = v[i + half];
    v[i] = a * cos[i] - b * sin[i];
    v[i + half] = b * cos[i] + a * sin[i];
  }
}

// Flush-to-zero and denormals-are-zero in every thread of an OpenMP team of `threads` (the
// engine's kernels and the Eigen GEMM run on that team; libgomp reuses the same pool threads for
// later teams of that size) for the life of the object; restores each thread's MXCSR after.
// OpenBLAS's own worker threads are out of reach and keep the process default; its sgemm over
// O(1) activations and weights does not produce denormals, softmax's exponentials do.
class DenormalsOff {
 public:
  explicit DenormalsOff(int threads) : threads_(threads) {
#if defined(__x86_64__) || defined(__i386__)
#pragma omp parallel num_threads(threads_)
    {
      saved_csr_ = _mm_getcsr();
      saved_ = true;
      _mm_setcsr(saved_csr_ | kFtzDaz);
    }
#endif
  }
  ~DenormalsOff() {
#if defined(__x86_64__) || defined(__i386__)
#pragma omp parallel num_threads(threads_)
    {
      if (saved_) _mm_setcsr(saved_csr_);
      saved_ = false;
    }
#endif
  }
  DenormalsOff(const DenormalsOff&) = delete;
  DenormalsOff& operator=(const DenormalsOff&) = delete;

 private:
  static constexpr unsigned kFtzDaz = 0x8040;  // MXCSR bits 15 (FTZ) and 6 (DAZ)
  static thread_local unsigned saved_csr_;
  static thread_local bool saved_;
  int threads_;
};
thread_local unsigned DenormalsOff::saved_csr_ = 0;
thread_local bool DenormalsOff::saved_ = false;

}  // namespace

size_t CpuEngineWeightBytes(const ModelConfig& model) {
  return static_cast<size_t>(model.TotalParams()) * sizeof(float);
}

size_t CpuEngineKvBytes(const ModelConfig& model, uint64_t kv_cache_blocks, uint32_t block_tokens) {
  const double bytes = static_cast<double>(kv_cache_blocks) * block_tokens *
                       static_cast<double>(model.KvBytesPerToken());
  if (bytes >= static_cast<double>(std::numeric_limits<size_t>::max())) {
    return std::numeric_limits<size_t>::max();
  }
  return static_cast<size_t>(kv_cache_blocks) * block_tokens * model.KvBytesPerToken();
}

struct CpuEngine::State {
  struct Layer {
    AlignedArray<float> attn_norm;  // [hidden], ones
    AlignedArray<float> mlp_norm;   // [hidden], ones
    AlignedArray<float> wqkv;       // [hidden][(heads + 2·kv_heads)·head_dim]
    AlignedArray<float> wo;         // [heads·head_dim][hidden]
    AlignedArray<float> wgate_up;   // [hidden][2·intermediate]
    AlignedArray<float> wdown;      // [intermediate][hidden]
    AlignedArray<unsigned char> k_pool;
    AlignedArray<unsigned char> v_pool;
  };

  ModelConfig model;
  CpuEngineOptions options;
  int threads = 1;
  PagedKvLayout layout;
  float scale = 0;
  uint32_t q_width = 0;    // heads·head_dim
  uint32_t kv_width = 0;   // kv_heads·head_dim
  uint32_t qkv_width = 0;  // q_width + 2·kv_width
  std::vector<Layer> layers;
  AlignedArray<float> embedding;   // [vocab][hidden]; empty when tied
  AlignedArray<float> lm_head;     // [hidden][vocab]
  AlignedArray<float> final_norm;  // [hidden], ones
  size_t weight_bytes = 0;
  size_t kv_bytes = 0;

  // RoPE tables [positions][head_dim / 2], grown on demand.
  AlignedArray<float> rope_cos;
  AlignedArray<float> rope_sin;
  uint32_t rope_positions = 0;

  // Activations, [rows][width].
  AlignedArray<float> x, xn, qkv, q, k_new, v_new, attn, tmp, gate_up, act;
  AlignedArray<float> sampled, logits;  // [requests][hidden], [requests][vocab]
  // Cascade: the prefix pass's states and the suffix pass's lse, [B][heads](·head_dim).
  AlignedArray<float> prefix_out, prefix_lse, suffix_lse;

  // Per-step host layout (plan_layout.h), reused.
  StepLayout step;
  std::vector<uint32_t> argmax;
  uint32_t last_requests = 0;
  DecodeWorkspace decode_workspace;
  StepShape last_shape;

  void GrowRope(uint32_t positions);
  void EnsureBuffers(uint32_t rows, uint32_t requests, uint32_t decode);
  void Embed(uint32_t rows);
  // One step's work (Execute's body, inside its denormal switch); fills every term but
  // kOverhead and total_ns.
  void Step(const BatchPlan& plan, StepTiming& timing);
  void Attention(Layer& layer, StepTiming& timing);
};

void CpuEngine::State::GrowRope(uint32_t positions) {
  if (positions <= rope_positions) return;
  const uint32_t grown = std::max({positions, rope_positions * 2, 4096u});
  const uint32_t half = model.head_dim / 2;
  float* cos = rope_cos.Reserve(size_t{grown} * half);
  float* sin = rope_sin.Reserve(size_t{grown} * half);
  for (uint32_t p = 0; p < grown; ++p) {
    for (uint32_t i = 0; i < half; ++i) {
      const double inv_freq = std::pow(kRopeTheta, -2.0 * i / model.head_dim);
      const double angle = p * inv_freq;
      cos[size_t{p} * half + i] = static_cast<float>(std::cos(angle));
      sin[size_t{p} * half + i] = static_cast<float>(std::sin(angle));
    }
  }
  rope_positions = grown;
}

void CpuEngine::State::EnsureBuffers(uint32_t rows, uint32_t requests, uint32_t decode) {
  const size_t r = rows;
  x.Reserve(r * model.hidden);
  xn.Reserve(r * model.hidden);
  tmp.Reserve(r * model.hidden);
  qkv.Reserve(r * qkv_width);
  q.Reserve(r * q_width);
  attn.Reserve(r * q_width);
  k_new.Reserve(r * kv_width);
  v_new.Reserve(r * kv_width);
  gate_up.Reserve(r * 2 * model.intermediate);
  act.Reserve(r * model.intermediate);
  sampled.Reserve(size_t{requests} * model.hidden);
  logits.Reserve(size_t{requests} * model.vocab);
  prefix_out.Reserve(size_t{decode} * q_width);
  prefix_lse.Reserve(size_t{decode} * model.heads);
  suffix_lse.Reserve(size_t{decode} * model.heads);
}

void CpuEngine::State::Embed(uint32_t rows) {
  const uint32_t hidden = model.hidden;
  float* out = x.data();
  for (uint32_t row = 0; row < rows; ++row) {
    const uint32_t token = TokenOf(step.row_request[row], step.row_position[row], model.vocab);
    float* dst = out + size_t{row} * hidden;
    if (model.tied_embeddings) {
      const float* column = lm_head.data() + token;  // column `token` of [hidden][vocab]
      for (uint32_t j = 0; j < hidden; ++j) dst[j] = column[size_t{j} * model.vocab];
    } else {
      std::memcpy(dst, embedding.data() + size_t{token} * hidden, sizeof(float) * hidden);
    }
  }
}

// KV appends and attention of one layer, rows' q/k_new/v_new ready; writes attn.
void CpuEngine::State::Attention(Layer& layer, StepTiming& timing) {
  auto& term = timing.term_ns;
  const auto kDecode = static_cast<size_t>(StepTerm::kDecodeAttention);
  const auto kCascade = static_cast<size_t>(StepTerm::kCascadePrefix);
  const auto kPrefill = static_cast<size_t>(StepTerm::kPrefillAttention);
  void* k_pool = layer.k_pool.data();
  void* v_pool = layer.v_pool.data();
  const uint32_t decode = step.num_decode;
  const uint32_t prefill = step.num_prefill;
  if (decode > 0) {
    int64_t t0 = NowNs();
    const PagedKvView kv = step.DecodeKv(k_pool, v_pool, layout);
    for (uint32_t b = 0; b < decode; ++b) {
      AppendKv(kv, b, step.Context(b), 1, k_new.data() + size_t{b} * kv_width,
               v_new.data() + size_t{b} * kv_width);
    }
    DecodeAttentionParams params;
    params.q = q.data();
    params.out = attn.data();
    params.kv = kv;
    params.num_heads = model.heads;
    params.scale = scale;
    params.num_threads = threads;
    if (step.cascade_prefix_tokens == 0) {
      PagedDecodeAttention(params, decode_workspace);
      term[kDecode] += NowNs() - t0;
    } else {
      // vLLM's batch-wide cascade: one group holding every decode request. The three parts of
      // CascadeDecodeAttention (cascade_attention.h) are called one by one so that the prefix
      // pass and merge (kCascadePrefix) are timed apart from the suffix pass (kDecodeAttention).
      const int64_t t1 = NowNs();
      term[kDecode] += t1 - t0;
      SharedPrefixParams prefix;
      prefix.q = q.data();
      prefix.out = prefix_out.data();
      prefix.lse = prefix_lse.data();
      prefix.kv = step.CascadePrefixKv(k_pool, v_pool, layout);
      prefix.num_queries = decode;
      prefix.num_heads = model.heads;
      prefix.scale = scale;
      prefix.num_threads = threads;
      SharedPrefixAttention(prefix);
      const int64_t t2 = NowNs();
      params.lse = suffix_lse.data();
      params.kv_begin = step.cascade_kv_begin.data();
      PagedDecodeAttention(params, decode_workspace);
      const int64_t t3 = NowNs();
      MergeAttentionStates(attn.data(), suffix_lse.data(), prefix_out.data(), prefix_lse.data(),
                           decode, model.heads, model.head_dim, threads);
      const int64_t t4 = NowNs();
      term[kCascade] += (t2 - t1) + (t4 - t3);
      term[kDecode] += t3 - t2;
    }
  }
  if (prefill > 0) {
    // Under cascade the prefill chunks still attend to their whole context here: the cost
    // model's prefill term takes the prefix P out (its pass is priced in kCascadePrefix), but
    // the n·P pairs that moves are negligible next to the prefix pass itself.
    const int64_t t0 = NowNs();
    const PagedKvView kv = step.PrefillKv(k_pool, v_pool, layout);
    const size_t first_row = step.qo_indptr[decode];
    for (uint32_t p = 0; p < prefill; ++p) {
      const size_t row = first_row + step.prefill_qo_indptr[p];
      AppendKv(kv, p, step.Context(decode + p), step.NewTokens(decode + p),
               k_new.data() + row * kv_width, v_new.data() + row * kv_width);
    }
    PrefillAttentionParams params;
    params.q = q.data() + first_row * q_width;
    params.out = attn.data() + first_row * q_width;
    params.kv = kv;
    params.qo_indptr = step.prefill_qo_indptr.data();
    params.num_heads = model.heads;
    params.scale = scale;
    params.num_threads = threads;
    PrefillAttention(params);
    term[kPrefill] += NowNs() - t0;
  }
}

CpuEngine::CpuEngine(const ModelConfig& model, uint64_t kv_cache_blocks, uint32_t block_tokens,
                     CpuEngineOptions options)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  if (model.layers == 0 || model.hidden == 0 || model.heads == 0 || model.kv_heads == 0 ||
      model.head_dim == 0 || model.intermediate == 0 || model.vocab == 0) {
    throw std::invalid_argument("cpu engine: model '" + model.name + "' has a zero dimension");
  }
  if (model.heads % model.kv_heads != 0) {
    throw std::invalid_argument("cpu engine: heads (" + std::to_string(model.heads) +
                                ") must be a multiple of kv_heads (" +
                                std::to_string(model.kv_heads) + ")");
  }
  if (model.head_dim % 8 != 0) {
    throw std::invalid_argument("cpu engine: head_dim " + std::to_string(model.head_dim) +
                                " is not a multiple of 8, which the attention kernels need");
  }
  if (block_tokens == 0) throw std::invalid_argument("cpu engine: block_tokens must be >= 1");
  if (kv_cache_blocks == 0 || kv_cache_blocks > std::numeric_limits<uint32_t>::max()) {
    throw std::invalid_argument("cpu engine: kv_cache_blocks " + std::to_string(kv_cache_blocks) +
                                " is outside [1, 2^32 - 1]");
  }
  if (model.dtype_bytes != 4 && model.dtype_bytes != 2) {
    throw std::invalid_argument("cpu engine: dtype of " + std::to_string(model.dtype_bytes) +
                                " bytes is not supported (fp32 or bf16 KV)");
  }
  const size_t weights = CpuEngineWeightBytes(model);
  const size_t kv = CpuEngineKvBytes(model, kv_cache_blocks, block_tokens);
  const size_t memory = PhysicalMemoryBytes();
  const double need = static_cast<double>(weights) + static_cast<double>(kv);
  if (memory > 0 && need > static_cast<double>(memory) / 2) {
    throw std::invalid_argument(
        "cpu engine: model '" + model.name + "' needs " + Mib(static_cast<double>(weights)) +
        " of fp32 weights + " + Mib(static_cast<double>(kv)) + " of KV cache (" +
        std::to_string(kv_cache_blocks) + " blocks of " + std::to_string(block_tokens) +
        " tokens, " + std::to_string(model.KvBytesPerToken()) + " bytes/token) = " + Mib(need) +
        ", more than half of this machine's " + Mib(static_cast<double>(memory)) +
        " of memory; lower serving.kv_cache_blocks or use a smaller model");
  }

  s.model = model;
  s.options = options;
  s.threads = options.num_threads > 0 ? options.num_threads : static_cast<int>(UsableCpus());
  s.layout = PagedKvLayout{.num_blocks = static_cast<uint32_t>(kv_cache_blocks),
                           .kv_heads = model.kv_heads,
                           .block_tokens = block_tokens,
                           .head_dim = model.head_dim,
                           .dtype = model.dtype_bytes == 4 ? KvDtype::kFp32 : KvDtype::kBf16};
  s.scale = 1.0F / std::sqrt(static_cast<float>(model.head_dim));
  s.q_width = model.heads * model.head_dim;
  s.kv_width = model.kv_heads * model.head_dim;
  s.qkv_width = s.q_width + 2 * s.kv_width;
  s.weight_bytes = weights;
  s.kv_bytes = kv;

  const int t = s.threads;
  const uint64_t seed = options.weight_seed;
  const size_t hidden = model.hidden;
  const size_t inter = model.intermediate;
  auto bound = [](size_t fan_in) { return std::sqrt(3.0F / static_cast<float>(fan_in)); };
  s.layers.resize(model.layers);
  const size_t pool_bytes = s.layout.PoolBytes();
  for (uint32_t l = 0; l < model.layers; ++l) {
    State::Layer& layer = s.layers[l];
    const uint64_t tag = uint64_t{l + 1} << 8;
    FillConstant(layer.attn_norm.Reserve(hidden), hidden, 1.0F);
    FillConstant(layer.mlp_norm.Reserve(hidden), hidden, 1.0F);
    FillUniform(layer.wqkv.Reserve(hidden * s.qkv_width), hidden * s.qkv_width, bound(hidden), seed,
                tag + 1, t);
    FillUniform(layer.wo.Reserve(size_t{s.q_width} * hidden), size_t{s.q_width} * hidden,
                bound(s.q_width), seed, tag + 2, t);
    FillUniform(layer.wgate_up.Reserve(hidden * 2 * inter), hidden * 2 * inter, bound(hidden), seed,
                tag + 3, t);
    FillUniform(layer.wdown.Reserve(inter * hidden), inter * hidden, bound(inter), seed, tag + 4,
                t);
    ZeroTouch(layer.k_pool.Reserve(pool_bytes), pool_bytes, t);
    ZeroTouch(layer.v_pool.Reserve(pool_bytes), pool_bytes, t);
  }
  const size_t table = size_t{model.vocab} * hidden;
  FillUniform(s.lm_head.Reserve(table), table, bound(hidden), seed, 1, t);
  if (!model.tied_embeddings) {
    FillUniform(s.embedding.Reserve(table), table, std::sqrt(3.0F), seed, 2, t);
  }
  FillConstant(s.final_norm.Reserve(hidden), hidden, 1.0F);
  s.GrowRope(4096);
}

CpuEngine::~CpuEngine() = default;

void CpuEngine::State::Step(const BatchPlan& plan, StepTiming& timing) {
  State& s = *this;
  const ModelConfig& m = s.model;
  const int t = s.threads;
  s.last_shape = ShapeStep(plan, m, s.options.cascade_attention, static_cast<uint32_t>(t));
  const StepShape& shape = s.last_shape;
  timing.cascade_used = shape.cascade();
  const uint32_t num_requests = plan.num_requests();
  s.last_requests = num_requests;
  s.argmax.clear();
  if (num_requests == 0) return;
  FEATHER_CHECK(plan.block_tokens == s.layout.block_tokens,
                "plan.block_tokens differs from the engine's KV block size");
  LayOutPlan(plan, static_cast<uint32_t>(shape.cascade_prefix_tokens), s.layout.num_blocks, s.step);
  const uint32_t rows = s.step.num_rows;
  const uint32_t decode = s.step.num_decode;

  s.GrowRope(s.step.max_position);
  s.EnsureBuffers(rows, num_requests, decode);
  s.Embed(rows);

  auto& term = timing.term_ns;
  const auto kGemm = static_cast<size_t>(StepTerm::kGemm);
  const GemmBackend backend = s.options.gemm_backend;
  const uint32_t hidden = m.hidden;
  const uint32_t inter = m.intermediate;
  const uint32_t half = m.head_dim / 2;
  for (State::Layer& layer : s.layers) {
    // Attention input: RMSNorm → QKV → RoPE on q and k, split into q, k_new, v_new.
    int64_t t0 = NowNs();
    RmsNorm(s.x.data(), layer.attn_norm.data(), s.xn.data(), rows, hidden, t);
    Gemm(backend, rows, s.qkv_width, hidden, s.xn.data(), layer.wqkv.data(), s.qkv.data(), t);
    {
      const bool parallel = size_t{rows} * s.qkv_width > kParallelMinElems;
      const float* cos_table = s.rope_cos.data();
      const float* sin_table = s.rope_sin.data();
#pragma omp parallel for num_threads(t) schedule(static) if (parallel)
      for (int64_t row = 0; row < int64_t{rows}; ++row) {
        const auto r = static_cast<size_t>(row);
        const float* cos = cos_table + size_t{s.step.row_position[r]} * half;
        const float* sin = sin_table + size_t{s.step.row_position[r]} * half;
        const float* in = s.qkv.data() + r * s.qkv_width;
        float* q_row = s.q.data() + r * s.q_width;
        float* k_row = s.k_new.data() + r * s.kv_width;
        float* v_row = s.v_new.data() + r * s.kv_width;
        std::memcpy(q_row, in, sizeof(float) * s.q_width);
        std::memcpy(k_row, in + s.q_width, sizeof(float) * s.kv_width);
        std::memcpy(v_row, in + s.q_width + s.kv_width, sizeof(float) * s.kv_width);
        for (uint32_t h = 0; h < m.heads; ++h) {
          RotateHalf(q_row + size_t{h} * m.head_dim, cos, sin, half);
        }
        for (uint32_t h = 0; h < m.kv_heads; ++h) {
          RotateHalf(k_row + size_t{h} * m.head_dim, cos, sin, half);
        }
      }
    }
    term[kGemm] += NowNs() - t0;

    s.Attention(layer, timing);

    // O projection, residual, MLP, residual.
    t0 = NowNs();
    Gemm(backend, rows, hidden, s.q_width, s.attn.data(), layer.wo.data(), s.tmp.data(), t);
    AddInPlace(s.x.data(), s.tmp.data(), size_t{rows} * hidden, t);
    RmsNorm(s.x.data(), layer.mlp_norm.data(), s.xn.data(), rows, hidden, t);
    Gemm(backend, rows, 2 * inter, hidden, s.xn.data(), layer.wgate_up.data(), s.gate_up.data(), t);
    SiluMul(s.gate_up.data(), s.act.data(), rows, inter, t);
    Gemm(backend, rows, hidden, inter, s.act.data(), layer.wdown.data(), s.tmp.data(), t);
    AddInPlace(s.x.data(), s.tmp.data(), size_t{rows} * hidden, t);
    term[kGemm] += NowNs() - t0;
  }

  // LM head over the sampled rows (plan order), argmax per row.
  {
    const int64_t t0 = NowNs();
    for (uint32_t i = 0; i < num_requests; ++i) {
      std::memcpy(s.sampled.data() + size_t{i} * hidden,
                  s.x.data() + size_t{s.step.sampled_row[i]} * hidden, sizeof(float) * hidden);
    }
    RmsNorm(s.sampled.data(), s.final_norm.data(), s.sampled.data(), num_requests, hidden, t);
    Gemm(backend, num_requests, m.vocab, hidden, s.sampled.data(), s.lm_head.data(),
         s.logits.data(), t);
    s.argmax.resize(num_requests);
    for (uint32_t i = 0; i < num_requests; ++i) {
      const float* row = s.logits.data() + size_t{i} * m.vocab;
      s.argmax[i] = static_cast<uint32_t>(std::max_element(row, row + m.vocab) - row);
    }
    term[kGemm] += NowNs() - t0;
  }
}

StepTiming CpuEngine::Execute(const BatchPlan& plan) {
  const int64_t start_ns = NowNs();
  StepTiming timing;
  {
    const DenormalsOff denormals_off(state_->threads);
    state_->Step(plan, timing);
  }
  timing.total_ns = NowNs() - start_ns;
  auto& term = timing.term_ns;
  const auto overhead = static_cast<size_t>(StepTerm::kOverhead);
  int64_t attributed = 0;
  for (size_t k = 0; k < kNumStepTerms; ++k) {
    if (k != overhead) attributed += term[k];
  }
  term[overhead] = std::max<int64_t>(0, timing.total_ns - attributed);
  return timing;
}

const StepShape& CpuEngine::last_shape() const { return state_->last_shape; }
int CpuEngine::num_threads() const { return state_->threads; }
size_t CpuEngine::weight_bytes() const { return state_->weight_bytes; }
size_t CpuEngine::kv_bytes() const { return state_->kv_bytes; }

std::span<const float> CpuEngine::last_logits() const {
  const State& s = *state_;
  if (s.last_requests == 0) return {};
  return {s.logits.data(), size_t{s.last_requests} * s.model.vocab};
}

std::span<const uint32_t> CpuEngine::last_argmax() const { return state_->argmax; }

}  // namespace feather::hw
