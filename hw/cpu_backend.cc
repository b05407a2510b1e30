// cpu_backend.cc: CpuBackend (see cpu_backend.h) — weights, KV pools, activations, and every
// layer operation of hw/backend.h through the hw/ CPU kernels.
#include "hw/cpu_backend.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "base/check.h"
#include "base/splitmix64.h"
#include "hw/aligned_memory.h"
#include "hw/cascade_attention.h"
#include "hw/decode_attention.h"
#include "hw/prefill_attention.h"
#include "hw/weight_init.h"

namespace feather::hw {
namespace {

constexpr float kRmsEps = 1e-5F;
constexpr double kRopeTheta = 10000.0;
// Elementwise loops smaller than this run on the calling thread (an OpenMP fork costs µs).
constexpr size_t kParallelMinElems = 16384;

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
      data_ = nullptr;  // if the allocation throws, the array is empty, not a freed one
      capacity_ = 0;
      data_ = static_cast<T*>(AllocateLargeArray(std::max<size_t>(n, 1) * sizeof(T)));
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

// Fills p[0, n) with the weights of matrix `tag` (hw/weight_init.h), in parallel; the writes
// are also the first touch of the pages.
void FillUniform(float* p, size_t n, float bound, uint64_t seed, uint64_t tag, int threads) {
  const uint64_t key = WeightKey(seed, tag);
  const auto count = static_cast<int64_t>(n);
#pragma omp parallel for num_threads(threads) schedule(static) if (n > kParallelMinElems)
  for (int64_t i = 0; i < count; ++i) p[i] = UniformWeight(key, static_cast<uint64_t>(i), bound);
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
void RmsNormRows(const float* x, const float* w, float* y, uint32_t rows, uint32_t width,
                 int threads) {
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
void AddRows(float* x, const float* y, size_t n, int threads) {
  const auto count = static_cast<int64_t>(n);
#pragma omp parallel for num_threads(threads) schedule(static) if (n > kParallelMinElems)
  for (int64_t i = 0; i < count; ++i) x[i] += y[i];
}

// act[r][j] = silu(gate[r][j]) · up[r][j]; gate_up rows are [gate | up].
void SiluMulRows(const float* gate_up, float* act, uint32_t rows, uint32_t inter, int threads) {
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

}  // namespace

size_t CpuWeightBytes(const ModelConfig& model) {
  return static_cast<size_t>(model.TotalParams()) * sizeof(float);
}

size_t CpuPackedWeightBytes(const ModelConfig& model) {
  auto panels = [](size_t k, size_t n) {
    return k * ((n + kGemmPanelColumns - 1) / kGemmPanelColumns) * kGemmPanelColumns;
  };
  const size_t hidden = model.hidden;
  const size_t q = size_t{model.heads} * model.head_dim;
  const size_t qkv = q + 2 * size_t{model.kv_heads} * model.head_dim;
  const size_t per_layer = panels(hidden, qkv) + panels(q, hidden) +
                           panels(hidden, 2 * size_t{model.intermediate}) +
                           panels(model.intermediate, hidden);
  return (size_t{model.layers} * per_layer + panels(hidden, model.vocab)) * sizeof(float);
}

size_t CpuKvBytes(const ModelConfig& model, uint64_t kv_cache_blocks, uint32_t block_tokens) {
  const double bytes = static_cast<double>(kv_cache_blocks) * block_tokens *
                       static_cast<double>(model.KvBytesPerToken());
  if (bytes >= static_cast<double>(std::numeric_limits<size_t>::max())) {
    return std::numeric_limits<size_t>::max();
  }
  return static_cast<size_t>(kv_cache_blocks) * block_tokens * model.KvBytesPerToken();
}

struct CpuBackend::State {
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
  CpuBackendOptions options;
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
  // packed_weights: the linear matrices as panels, per layer (QKV, O, gate|up, down), and the
  // LM head; empty without.
  std::vector<std::array<PackedB, 4>> packed_layers;
  PackedB packed_lm_head;
  size_t weight_bytes = 0;
  size_t packed_bytes = 0;
  size_t kv_bytes = 0;

  // RoPE tables [positions][head_dim / 2], grown on demand.
  AlignedArray<float> rope_cos;
  AlignedArray<float> rope_sin;
  uint32_t rope_positions = 0;

  // Activations, [rows][width]; k_new and v_new are the new tokens' K and V rows.
  AlignedArray<float> x, xn, qkv, q, k_new, v_new, attn, tmp, gate_up, act;
  AlignedArray<float> sampled, logits;  // [requests][hidden], [requests][vocab]
  // Cascade: the prefix pass's states and the suffix pass's lse, [B][heads](·head_dim).
  AlignedArray<float> prefix_out, prefix_lse, suffix_lse;

  const StepLayout* step = nullptr;  // the current step's layout (BeginStep)
  std::vector<uint32_t> argmax;
  uint32_t last_requests = 0;
  DecodeWorkspace decode_workspace;

  void GrowRope(uint32_t positions);
  void EnsureBuffers(uint32_t rows, uint32_t requests, uint32_t decode);
  void Embed(uint32_t rows);
  [[nodiscard]] float* Data(Buffer buffer);
  // The weight's data, and its rows × columns (in → out widths).
  [[nodiscard]] const float* WeightData(Weight w, uint32_t layer) const;
  // The linear weight's packed copy, or nullptr without packed weights.
  [[nodiscard]] const PackedB* Packed(Weight w, uint32_t layer) const;
  [[nodiscard]] std::pair<uint32_t, uint32_t> WeightShape(Weight w) const;
  [[nodiscard]] PagedKvView Kv(uint32_t layer) {
    Layer& l = layers[layer];
    return step->Kv(l.k_pool.data(), l.v_pool.data(), layout);
  }
};

void CpuBackend::State::GrowRope(uint32_t positions) {
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

void CpuBackend::State::EnsureBuffers(uint32_t rows, uint32_t requests, uint32_t decode) {
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

void CpuBackend::State::Embed(uint32_t rows) {
  const uint32_t hidden = model.hidden;
  float* out = x.data();
  for (uint32_t row = 0; row < rows; ++row) {
    const uint32_t token = TokenOf(step->row_request[row], step->row_position[row], model.vocab);
    float* dst = out + size_t{row} * hidden;
    if (model.tied_embeddings) {
      const float* column = lm_head.data() + token;  // column `token` of [hidden][vocab]
      for (uint32_t j = 0; j < hidden; ++j) dst[j] = column[size_t{j} * model.vocab];
    } else {
      std::memcpy(dst, embedding.data() + size_t{token} * hidden, sizeof(float) * hidden);
    }
  }
}

float* CpuBackend::State::Data(Buffer buffer) {
  switch (buffer) {
    case Buffer::kHidden:
      return x.data();
    case Buffer::kNormed:
      return xn.data();
    case Buffer::kQkv:
      return qkv.data();
    case Buffer::kQ:
      return q.data();
    case Buffer::kAttn:
      return attn.data();
    case Buffer::kTmp:
      return tmp.data();
    case Buffer::kGateUp:
      return gate_up.data();
    case Buffer::kAct:
      return act.data();
    case Buffer::kSampled:
      return sampled.data();
    case Buffer::kLogits:
      return logits.data();
  }
  FEATHER_CHECK(false, "unknown activation buffer");
  return nullptr;
}

const float* CpuBackend::State::WeightData(Weight w, uint32_t layer) const {
  switch (w) {
    case Weight::kAttnNorm:
      return layers[layer].attn_norm.data();
    case Weight::kQkv:
      return layers[layer].wqkv.data();
    case Weight::kO:
      return layers[layer].wo.data();
    case Weight::kMlpNorm:
      return layers[layer].mlp_norm.data();
    case Weight::kGateUp:
      return layers[layer].wgate_up.data();
    case Weight::kDown:
      return layers[layer].wdown.data();
    case Weight::kFinalNorm:
      return final_norm.data();
    case Weight::kLmHead:
      return lm_head.data();
  }
  FEATHER_CHECK(false, "unknown weight");
  return nullptr;
}

const PackedB* CpuBackend::State::Packed(Weight w, uint32_t layer) const {
  if (packed_layers.empty()) return nullptr;
  switch (w) {
    case Weight::kQkv:
      return &packed_layers[layer][0];
    case Weight::kO:
      return &packed_layers[layer][1];
    case Weight::kGateUp:
      return &packed_layers[layer][2];
    case Weight::kDown:
      return &packed_layers[layer][3];
    case Weight::kLmHead:
      return &packed_lm_head;
    default:
      return nullptr;
  }
}

std::pair<uint32_t, uint32_t> CpuBackend::State::WeightShape(Weight w) const {
  switch (w) {
    case Weight::kQkv:
      return {model.hidden, qkv_width};
    case Weight::kO:
      return {q_width, model.hidden};
    case Weight::kGateUp:
      return {model.hidden, 2 * model.intermediate};
    case Weight::kDown:
      return {model.intermediate, model.hidden};
    case Weight::kLmHead:
      return {model.hidden, model.vocab};
    case Weight::kAttnNorm:
    case Weight::kMlpNorm:
    case Weight::kFinalNorm:
      return {1, model.hidden};
  }
  FEATHER_CHECK(false, "unknown weight");
  return {0, 0};
}

CpuBackend::CpuBackend(const ModelConfig& model, uint64_t kv_cache_blocks, uint32_t block_tokens,
                       CpuBackendOptions options)
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
  const bool packed = options.packed_weights && options.gemm_backend == GemmBackend::kEigen &&
                      DefaultGemmBackend() == GemmBackend::kEigen;  // Eigen runs: AVX2 + FMA
  const size_t packed_bound = packed ? CpuPackedWeightBytes(model) : 0;
  const size_t weights = CpuWeightBytes(model);
  const size_t kv = CpuKvBytes(model, kv_cache_blocks, block_tokens);
  const size_t memory = PhysicalMemoryBytes();
  const double need =
      static_cast<double>(weights) + static_cast<double>(packed_bound) + static_cast<double>(kv);
  if (memory > 0 && need > static_cast<double>(memory) / 2) {
    throw std::invalid_argument(
        "cpu engine: model '" + model.name + "' needs " + Mib(static_cast<double>(weights)) +
        " of fp32 weights" +
        (packed ? " + " + Mib(static_cast<double>(packed_bound)) + " of packed copies" : "") +
        " + " + Mib(static_cast<double>(kv)) + " of KV cache (" + std::to_string(kv_cache_blocks) +
        " blocks of " + std::to_string(block_tokens) + " tokens, " +
        std::to_string(model.KvBytesPerToken()) + " bytes/token) = " + Mib(need) +
        ", more than half of this machine's " + Mib(static_cast<double>(memory)) +
        " of memory; lower serving.kv_cache_blocks or use a smaller model");
  }

  s.model = model;
  s.options = options;
  s.threads = std::max(1, options.num_threads);
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
  auto bound = [](size_t fan_in) { return ProjectionBound(fan_in); };
  auto tag = [](WeightMatrix matrix, uint32_t l) { return TagOf(matrix, l); };
  s.layers.resize(model.layers);
  const size_t pool_bytes = s.layout.PoolBytes();
  for (uint32_t l = 0; l < model.layers; ++l) {
    State::Layer& layer = s.layers[l];
    FillConstant(layer.attn_norm.Reserve(hidden), hidden, 1.0F);
    FillConstant(layer.mlp_norm.Reserve(hidden), hidden, 1.0F);
    FillUniform(layer.wqkv.Reserve(hidden * s.qkv_width), hidden * s.qkv_width, bound(hidden), seed,
                tag(WeightMatrix::kQkv, l), t);
    FillUniform(layer.wo.Reserve(size_t{s.q_width} * hidden), size_t{s.q_width} * hidden,
                bound(s.q_width), seed, tag(WeightMatrix::kO, l), t);
    FillUniform(layer.wgate_up.Reserve(hidden * 2 * inter), hidden * 2 * inter, bound(hidden), seed,
                tag(WeightMatrix::kGateUp, l), t);
    FillUniform(layer.wdown.Reserve(inter * hidden), inter * hidden, bound(inter), seed,
                tag(WeightMatrix::kDown, l), t);
    ZeroTouch(layer.k_pool.Reserve(pool_bytes), pool_bytes, t);
    ZeroTouch(layer.v_pool.Reserve(pool_bytes), pool_bytes, t);
  }
  const size_t table = size_t{model.vocab} * hidden;
  FillUniform(s.lm_head.Reserve(table), table, bound(hidden), seed, tag(WeightMatrix::kLmHead, 0),
              t);
  if (!model.tied_embeddings) {
    FillUniform(s.embedding.Reserve(table), table, EmbeddingBound(), seed,
                tag(WeightMatrix::kEmbedding, 0), t);
  }
  FillConstant(s.final_norm.Reserve(hidden), hidden, 1.0F);
  if (packed) {
    s.packed_layers.resize(model.layers);
    for (uint32_t l = 0; l < model.layers; ++l) {
      const Weight kinds[] = {Weight::kQkv, Weight::kO, Weight::kGateUp, Weight::kDown};
      for (size_t i = 0; i < 4; ++i) {
        const auto [k, n] = s.WeightShape(kinds[i]);
        s.packed_layers[l][i] = PackedB(s.WeightData(kinds[i], l), k, n);
        s.packed_bytes += s.packed_layers[l][i].bytes();
      }
    }
    const auto [k, n] = s.WeightShape(Weight::kLmHead);
    s.packed_lm_head = PackedB(s.lm_head.data(), k, n);
    s.packed_bytes += s.packed_lm_head.bytes();
  }
  s.GrowRope(4096);
}

CpuBackend::~CpuBackend() = default;

void CpuBackend::BeginStep(const StepLayout& layout) {
  State& s = *state_;
  FEATHER_CHECK(layout.page_size == s.layout.block_tokens,
                "the step's page size differs from the backend's KV block size");
  s.step = &layout;
  const auto requests = static_cast<uint32_t>(layout.sampled_row.size());
  s.last_requests = requests;
  s.GrowRope(layout.max_position);
  s.EnsureBuffers(layout.num_rows, requests, layout.num_decode);
  s.Embed(layout.num_rows);
}

void CpuBackend::RmsNorm(Buffer in, Weight w, uint32_t layer, Buffer out, uint32_t rows) {
  State& s = *state_;
  RmsNormRows(s.Data(in), s.WeightData(w, layer), s.Data(out), rows, s.model.hidden, s.threads);
}

void CpuBackend::Linear(Buffer in, Weight w, uint32_t layer, Buffer out, uint32_t rows) {
  State& s = *state_;
  if (const PackedB* packed = s.Packed(w, layer)) {
    GemmPackedB(rows, s.Data(in), *packed, s.Data(out), s.threads);
    return;
  }
  const auto [k, n] = s.WeightShape(w);
  Gemm(s.options.gemm_backend, rows, n, k, s.Data(in), s.WeightData(w, layer), s.Data(out),
       s.threads);
}

void CpuBackend::RopeSplitQkv() {
  State& s = *state_;
  const ModelConfig& m = s.model;
  const uint32_t rows = s.step->num_rows;
  const uint32_t half = m.head_dim / 2;
  const bool parallel = size_t{rows} * s.qkv_width > kParallelMinElems;
  const float* cos_table = s.rope_cos.data();
  const float* sin_table = s.rope_sin.data();
  const uint32_t* position = s.step->row_position.data();
#pragma omp parallel for num_threads(s.threads) schedule(static) if (parallel)
  for (int64_t row = 0; row < int64_t{rows}; ++row) {
    const auto r = static_cast<size_t>(row);
    const float* cos = cos_table + size_t{position[r]} * half;
    const float* sin = sin_table + size_t{position[r]} * half;
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

void CpuBackend::AddInPlace(Buffer x, Buffer y) {
  State& s = *state_;
  AddRows(s.Data(x), s.Data(y), size_t{s.step->num_rows} * s.model.hidden, s.threads);
}

void CpuBackend::SiluMul() {
  State& s = *state_;
  SiluMulRows(s.gate_up.data(), s.act.data(), s.step->num_rows, s.model.intermediate, s.threads);
}

void CpuBackend::AppendKv(uint32_t layer, uint32_t first, uint32_t count) {
  State& s = *state_;
  const PagedKvView kv = s.Kv(layer);
  for (uint32_t e = first; e < first + count; ++e) {
    const size_t row = s.step->qo_indptr[e];
    hw::AppendKv(kv, e, s.step->Context(e), s.step->NewTokens(e), s.k_new.data() + row * s.kv_width,
                 s.v_new.data() + row * s.kv_width);
  }
}

void CpuBackend::DecodeAttention(uint32_t layer, bool suffix_only) {
  State& s = *state_;
  DecodeAttentionParams params;
  params.q = s.q.data();
  params.out = s.attn.data();
  params.kv = s.Kv(layer).Slice(0, s.step->num_decode);
  params.num_heads = s.model.heads;
  params.scale = s.scale;
  params.num_threads = s.threads;
  if (suffix_only) {
    params.lse = s.suffix_lse.data();
    params.kv_begin = s.step->cascade_kv_begin.data();
  }
  PagedDecodeAttention(params, s.decode_workspace);
}

void CpuBackend::CascadePrefix(uint32_t layer) {
  State& s = *state_;
  State::Layer& l = s.layers[layer];
  SharedPrefixParams prefix;
  prefix.q = s.q.data();
  prefix.out = s.prefix_out.data();
  prefix.lse = s.prefix_lse.data();
  prefix.kv = s.step->CascadePrefixKv(l.k_pool.data(), l.v_pool.data(), s.layout);
  prefix.num_queries = s.step->num_decode;
  prefix.num_heads = s.model.heads;
  prefix.scale = s.scale;
  prefix.num_threads = s.threads;
  SharedPrefixAttention(prefix);
}

void CpuBackend::CascadeMerge() {
  State& s = *state_;
  MergeAttentionStates(s.attn.data(), s.suffix_lse.data(), s.prefix_out.data(), s.prefix_lse.data(),
                       s.step->num_decode, s.model.heads, s.model.head_dim, s.threads);
}

void CpuBackend::PrefillAttention(uint32_t layer) {
  State& s = *state_;
  const size_t first_row = s.step->qo_indptr[s.step->num_decode];
  PrefillAttentionParams params;
  params.q = s.q.data() + first_row * s.q_width;
  params.out = s.attn.data() + first_row * s.q_width;
  params.kv = s.Kv(layer).Slice(s.step->num_decode, s.step->num_prefill);
  params.qo_indptr = s.step->prefill_qo_indptr.data();
  params.num_heads = s.model.heads;
  params.scale = s.scale;
  params.num_threads = s.threads;
  hw::PrefillAttention(params);
}

void CpuBackend::GatherSampledRows() {
  State& s = *state_;
  const uint32_t hidden = s.model.hidden;
  for (uint32_t i = 0; i < s.last_requests; ++i) {
    std::memcpy(s.sampled.data() + size_t{i} * hidden,
                s.x.data() + size_t{s.step->sampled_row[i]} * hidden, sizeof(float) * hidden);
  }
}

void CpuBackend::Argmax() {
  State& s = *state_;
  const uint32_t vocab = s.model.vocab;
  s.argmax.resize(s.last_requests);
  for (uint32_t i = 0; i < s.last_requests; ++i) {
    const float* row = s.logits.data() + size_t{i} * vocab;
    s.argmax[i] = static_cast<uint32_t>(std::max_element(row, row + vocab) - row);
  }
}

const PagedKvLayout& CpuBackend::kv_layout() const { return state_->layout; }
int CpuBackend::num_threads() const { return state_->threads; }
size_t CpuBackend::weight_bytes() const { return state_->weight_bytes; }
bool CpuBackend::packed_weights() const { return !state_->packed_layers.empty(); }
size_t CpuBackend::packed_weight_bytes() const { return state_->packed_bytes; }
size_t CpuBackend::kv_bytes() const { return state_->kv_bytes; }

std::span<const float> CpuBackend::logits() const {
  const State& s = *state_;
  if (s.last_requests == 0) return {};
  return {s.logits.data(), size_t{s.last_requests} * s.model.vocab};
}

std::span<const uint32_t> CpuBackend::argmax() const { return state_->argmax; }

}  // namespace feather::hw
