// cuda_backend.cc: CudaBackend (see cuda_backend.h).
#include "hw/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/check.h"
#include "hw/cuda/attention_kernels.h"
#include "hw/cuda/attention_plan.h"
#include "hw/cuda/backend_kernels.h"
#include "hw/cuda/cuda_check.h"
#include "hw/cuda/device.h"
#include "hw/cuda/gemm_cublas.h"
#include "hw/cuda/step_plans.h"
#include "hw/weight_init.h"

namespace feather::hw::cuda {
namespace {

constexpr float kRmsEps = 1e-5F;  // hw/cpu_backend.cc's
constexpr double kRopeTheta = 10000.0;

// Device memory that only grows (contents not kept when it grows).
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  ~DeviceArray() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), capacity_(std::exchange(other.capacity_, 0)) {}
  DeviceArray& operator=(DeviceArray&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(capacity_, other.capacity_);
    return *this;
  }

  T* Reserve(size_t n) {
    if (n > capacity_ || data_ == nullptr) {
      if (data_ != nullptr) FEATHER_CUDA_CHECK(cudaFree(data_));
      data_ = nullptr;
      FEATHER_CUDA_CHECK(cudaMalloc(&data_, std::max<size_t>(n, 1) * sizeof(T)));
      capacity_ = std::max<size_t>(n, 1);
    }
    return data_;
  }
  // Copies `host` in (asynchronously on `stream`; the host vector must outlive the copy, which
  // the backend's vectors do until the next BeginStep, after a Synchronize).
  T* Upload(const std::vector<T>& host, cudaStream_t stream) {
    T* device = Reserve(host.size());
    if (!host.empty()) {
      FEATHER_CUDA_CHECK(cudaMemcpyAsync(device, host.data(), host.size() * sizeof(T),
                                         cudaMemcpyHostToDevice, stream));
    }
    return device;
  }
  [[nodiscard]] T* data() const { return data_; }

 private:
  T* data_ = nullptr;
  size_t capacity_ = 0;
};

// The device copy of one attention plan.
struct DevicePlan {
  const AttentionPlan* plan = nullptr;
  bool active = false;
  DeviceArray<AttentionWorkItem> items;
  DeviceArray<uint32_t> row_list, merge_rows, merge_indptr, merge_slots;
  DeviceArray<float> partial_out, partial_lse;

  void Upload(const AttentionPlan& host, cudaStream_t stream, uint32_t heads, uint32_t head_dim) {
    plan = &host;
    items.Upload(host.items, stream);
    row_list.Upload(host.row_list, stream);
    merge_rows.Upload(host.merge_rows, stream);
    merge_indptr.Upload(host.merge_indptr, stream);
    merge_slots.Upload(host.merge_slots, stream);
    partial_out.Reserve(size_t{host.num_slots} * heads * head_dim);
    partial_lse.Reserve(size_t{host.num_slots} * heads);
  }
  void Fill(PagedAttentionArgs& a) const {
    a.items = items.data();
    a.num_items = static_cast<uint32_t>(plan->items.size());
    a.row_list = row_list.data();
    a.merge_rows = merge_rows.data();
    a.merge_indptr = merge_indptr.data();
    a.merge_slots = merge_slots.data();
    a.num_merge_rows = static_cast<uint32_t>(plan->merge_rows.size());
    a.partial_out = partial_out.data();
    a.partial_lse = partial_lse.data();
  }
};

}  // namespace

struct CudaBackend::State {
  struct Layer {
    DeviceArray<float> attn_norm, mlp_norm, wqkv, wo, wgate_up, wdown;
    // With bf16 weights the matrices live here instead (the fp32 arrays above stay empty).
    DeviceArray<uint16_t> wqkv16, wo16, wgate_up16, wdown16;
    DeviceArray<unsigned char> k_pool, v_pool;
  };
  ModelConfig model;
  CudaBackendOptions options;
  CudaDeviceInfo device;
  PagedKvLayout layout;
  KvElement dtype = KvElement::kBf16;
  float scale = 0;
  uint32_t q_width = 0, kv_width = 0, qkv_width = 0;
  size_t weight_bytes = 0, kv_bytes = 0;
  cudaStream_t stream = nullptr;
  std::unique_ptr<CublasGemm> gemm;
  std::vector<Layer> layers;
  DeviceArray<float> embedding, lm_head, final_norm;
  DeviceArray<uint16_t> lm_head16;  // bf16 weights: the LM head's product (embedding stays fp32)
  DeviceArray<uint16_t> input16;    // bf16 weights: a Linear's input rounded to bf16
  DeviceArray<float> x, xn, qkv, q, k_new, v_new, attn, tmp, gate_up, act, sampled, logits;
  DeviceArray<float> prefix_out, prefix_lse, suffix_lse;
  DeviceArray<uint32_t> argmax;

  // The step: its host layout, the per-row entry, and device copies.
  const StepLayout* step = nullptr;
  uint32_t requests = 0;
  std::vector<uint32_t> row_entry;
  DeviceArray<uint32_t> d_kv_indptr, d_kv_indices, d_row_position, d_row_request, d_row_entry,
      d_sampled_row, d_cascade_indptr;
  StepAttentionPlans plans;
  DevicePlan decode, prefix, prefill;
  std::vector<float> host_logits;
  std::vector<uint32_t> host_argmax;

  float* Data(Buffer buffer) {
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
  const float* WeightData(Weight w, uint32_t layer) const {
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
  // The bf16 copy of a matrix weight (bf16_weights only).
  const uint16_t* WeightData16(Weight w, uint32_t layer) const {
    switch (w) {
      case Weight::kQkv:
        return layers[layer].wqkv16.data();
      case Weight::kO:
        return layers[layer].wo16.data();
      case Weight::kGateUp:
        return layers[layer].wgate_up16.data();
      case Weight::kDown:
        return layers[layer].wdown16.data();
      case Weight::kLmHead:
        return lm_head16.data();
      default:
        break;
    }
    FEATHER_CHECK(false, "not a matrix weight");
    return nullptr;
  }
  std::pair<uint32_t, uint32_t> WeightShape(Weight w) const {
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
      default:
        break;
    }
    FEATHER_CHECK(false, "not a matrix weight");
    return {0, 0};
  }
  // Attention args over `layer`'s pools and the step's page table, for `plan`.
  PagedAttentionArgs Args(uint32_t layer, const DevicePlan& plan) {
    PagedAttentionArgs a;
    a.k_pool = layers[layer].k_pool.data();
    a.v_pool = layers[layer].v_pool.data();
    a.dtype = dtype;
    a.stride_page = layout.StridePage();
    a.stride_head = layout.StrideHead();
    a.page_size = layout.block_tokens;
    a.head_dim = model.head_dim;
    a.num_heads = model.heads;
    a.kv_heads = model.kv_heads;
    a.scale = scale;
    a.decode_kernel = options.decode_kernel;
    plan.Fill(a);
    return a;
  }
  StepPointers Pointers() {
    StepPointers p;
    p.q = q.data();
    p.attn = attn.data();
    p.suffix_lse = suffix_lse.data();
    p.prefix_out = prefix_out.data();
    p.prefix_lse = prefix_lse.data();
    p.kv_indptr = d_kv_indptr.data();
    p.kv_indices = d_kv_indices.data();
    p.cascade_indptr = d_cascade_indptr.data();
    return p;
  }
  void Fill(DeviceArray<float>& array, size_t n, WeightMatrix matrix, uint32_t layer, float bound) {
    LaunchFillWeights(array.Reserve(n), n, WeightKey(options.weight_seed, TagOf(matrix, layer)),
                      bound, stream);
  }
  // The same values rounded to bf16, through `scratch` (as large as the largest matrix).
  void Fill16(DeviceArray<uint16_t>& array, DeviceArray<float>& scratch, size_t n,
              WeightMatrix matrix, uint32_t layer, float bound) {
    Fill(scratch, n, matrix, layer, bound);
    LaunchToBf16(scratch.data(), array.Reserve(n), n, stream);
  }
  void Ones(DeviceArray<float>& array, size_t n) {
    LaunchFillConstant(array.Reserve(n), n, 1.0F, stream);
  }
};

CudaBackend::CudaBackend(const ModelConfig& model, uint64_t kv_cache_blocks, uint32_t block_tokens,
                         CudaBackendOptions options)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.device = QueryCudaDevice();
  if (!s.device.available) throw std::runtime_error("cuda engine: " + s.device.why_not);
  if (model.layers == 0 || model.hidden == 0 || model.heads == 0 || model.kv_heads == 0 ||
      model.intermediate == 0 || model.vocab == 0) {
    throw std::invalid_argument("cuda engine: model '" + model.name + "' has a zero dimension");
  }
  if (model.heads % model.kv_heads != 0) {
    throw std::invalid_argument("cuda engine: heads must be a multiple of kv_heads");
  }
  const AttentionGeometry geometry =
      ChooseAttentionGeometry(model.head_dim, model.heads / model.kv_heads, 1);
  if (geometry.unsupported != nullptr) {
    throw std::invalid_argument(std::string("cuda engine: model '") + model.name +
                                "': " + geometry.unsupported);
  }
  if (model.dtype_bytes != 4 && model.dtype_bytes != 2) {
    throw std::invalid_argument("cuda engine: dtype of " + std::to_string(model.dtype_bytes) +
                                " bytes is not supported (fp32, bf16 or fp16 KV)");
  }
  if (block_tokens == 0 || kv_cache_blocks == 0 || kv_cache_blocks > 0xffffffffull) {
    throw std::invalid_argument("cuda engine: block_tokens and kv_cache_blocks must be positive");
  }
  s.model = model;
  s.options = options;
  s.dtype = model.dtype_bytes == 4 ? KvElement::kFp32
                                   : (options.fp16_kv ? KvElement::kFp16 : KvElement::kBf16);
  s.layout = PagedKvLayout{.num_blocks = static_cast<uint32_t>(kv_cache_blocks),
                           .kv_heads = model.kv_heads,
                           .block_tokens = block_tokens,
                           .head_dim = model.head_dim,
                           .dtype = model.dtype_bytes == 4 ? KvDtype::kFp32 : KvDtype::kBf16};
  s.scale = 1.0F / std::sqrt(static_cast<float>(model.head_dim));
  s.q_width = model.heads * model.head_dim;
  s.kv_width = model.kv_heads * model.head_dim;
  s.qkv_width = s.q_width + 2 * s.kv_width;
  const size_t table = size_t{model.vocab} * model.hidden;
  if (options.bf16_weights) {
    // Matrices in bf16; norms and the embedding table in fp32 (with tied embeddings the LM head
    // is kept in both: fp32 for the embedding lookup, bf16 for the product). Counted: every
    // parameter in bf16, plus the lookup table's other half (untied) or a whole fp32 copy (tied);
    // the norms' other half is noise.
    const size_t params = static_cast<size_t>(model.TotalParams());
    s.weight_bytes = params * sizeof(uint16_t) +
                     table * (model.tied_embeddings ? sizeof(float) : sizeof(uint16_t));
  } else {
    s.weight_bytes = static_cast<size_t>(model.TotalParams()) * sizeof(float);
  }
  const size_t pool_bytes = s.layout.BlockElems() * kv_cache_blocks * KvElementBytes(s.dtype);
  s.kv_bytes = 2 * pool_bytes * model.layers;
  const double need = static_cast<double>(s.weight_bytes) + static_cast<double>(s.kv_bytes);
  if (need > 0.9 * static_cast<double>(s.device.memory_bytes)) {
    throw std::invalid_argument("cuda engine: weights + KV need " +
                                std::to_string(static_cast<uint64_t>(need / (1 << 20))) +
                                " MiB, over 90 % of " + s.device.name + "'s " +
                                std::to_string(s.device.memory_bytes >> 20) + " MiB");
  }
  FEATHER_CUDA_CHECK(cudaSetDevice(s.device.device));
  FEATHER_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  s.gemm = std::make_unique<CublasGemm>(s.stream);

  const size_t hidden = model.hidden;
  const size_t inter = model.intermediate;
  const bool bf16 = options.bf16_weights;
  DeviceArray<float> scratch;  // bf16 weights: each matrix's fp32 values before rounding
  auto matrix = [&](DeviceArray<float>& fp32, DeviceArray<uint16_t>& half, size_t n,
                    WeightMatrix which, uint32_t l, float bound) {
    if (bf16) {
      s.Fill16(half, scratch, n, which, l, bound);
    } else {
      s.Fill(fp32, n, which, l, bound);
    }
  };
  s.layers.resize(model.layers);
  for (uint32_t l = 0; l < model.layers; ++l) {
    State::Layer& layer = s.layers[l];
    s.Ones(layer.attn_norm, hidden);
    s.Ones(layer.mlp_norm, hidden);
    matrix(layer.wqkv, layer.wqkv16, hidden * s.qkv_width, WeightMatrix::kQkv, l,
           ProjectionBound(hidden));
    matrix(layer.wo, layer.wo16, size_t{s.q_width} * hidden, WeightMatrix::kO, l,
           ProjectionBound(s.q_width));
    matrix(layer.wgate_up, layer.wgate_up16, hidden * 2 * inter, WeightMatrix::kGateUp, l,
           ProjectionBound(hidden));
    matrix(layer.wdown, layer.wdown16, inter * hidden, WeightMatrix::kDown, l,
           ProjectionBound(inter));
    FEATHER_CUDA_CHECK(cudaMemsetAsync(layer.k_pool.Reserve(pool_bytes), 0, pool_bytes, s.stream));
    FEATHER_CUDA_CHECK(cudaMemsetAsync(layer.v_pool.Reserve(pool_bytes), 0, pool_bytes, s.stream));
  }
  if (bf16) {
    s.Fill16(s.lm_head16, scratch, table, WeightMatrix::kLmHead, 0, ProjectionBound(hidden));
    // The embedding lookup reads the LM head when the embeddings are tied: keep it in fp32 too.
    if (model.tied_embeddings) {
      s.Fill(s.lm_head, table, WeightMatrix::kLmHead, 0, ProjectionBound(hidden));
    }
  } else {
    s.Fill(s.lm_head, table, WeightMatrix::kLmHead, 0, ProjectionBound(hidden));
  }
  if (!model.tied_embeddings) {
    s.Fill(s.embedding, table, WeightMatrix::kEmbedding, 0, EmbeddingBound());
  }
  s.Ones(s.final_norm, hidden);
  FEATHER_CUDA_CHECK(cudaStreamSynchronize(s.stream));
}

CudaBackend::~CudaBackend() {
  if (state_ && state_->stream != nullptr) {
    cudaStreamSynchronize(state_->stream);
    state_->gemm.reset();
    cudaStreamDestroy(state_->stream);
  }
}

void CudaBackend::BeginStep(const StepLayout& layout) {
  State& s = *state_;
  FEATHER_CHECK(layout.page_size == s.layout.block_tokens,
                "the step's page size differs from the backend's KV block size");
  // The previous step's uploads read host vectors this step overwrites: wait for them.
  FEATHER_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  s.step = &layout;
  s.requests = static_cast<uint32_t>(layout.sampled_row.size());
  const size_t rows = layout.num_rows;
  const ModelConfig& m = s.model;
  s.x.Reserve(rows * m.hidden);
  s.xn.Reserve(rows * m.hidden);
  s.tmp.Reserve(rows * m.hidden);
  s.qkv.Reserve(rows * s.qkv_width);
  s.q.Reserve(rows * s.q_width);
  s.attn.Reserve(rows * s.q_width);
  s.k_new.Reserve(rows * s.kv_width);
  s.v_new.Reserve(rows * s.kv_width);
  s.gate_up.Reserve(rows * 2 * m.intermediate);
  s.act.Reserve(rows * m.intermediate);
  s.sampled.Reserve(size_t{s.requests} * m.hidden);
  s.logits.Reserve(size_t{s.requests} * m.vocab);
  s.argmax.Reserve(s.requests);
  s.prefix_out.Reserve(size_t{layout.num_decode} * s.q_width);
  s.prefix_lse.Reserve(size_t{layout.num_decode} * m.heads);
  s.suffix_lse.Reserve(size_t{layout.num_decode} * m.heads);

  s.row_entry.resize(rows);
  for (uint32_t e = 0; e < layout.num_entries(); ++e) {
    for (uint32_t r = layout.qo_indptr[e]; r < layout.qo_indptr[e + 1]; ++r) s.row_entry[r] = e;
  }
  s.d_kv_indptr.Upload(layout.kv_indptr, s.stream);
  s.d_kv_indices.Upload(layout.kv_indices, s.stream);
  s.d_row_position.Upload(layout.row_position, s.stream);
  static_assert(std::is_same_v<RequestId, uint32_t>);
  s.d_row_request.Upload(layout.row_request, s.stream);
  s.d_row_entry.Upload(s.row_entry, s.stream);
  s.d_sampled_row.Upload(layout.sampled_row, s.stream);

  // Plans: decode (or cascade suffix), cascade prefix, prefill (hw/cuda/step_plans.h).
  const auto max_ctas =
      static_cast<uint32_t>(s.device.sm_count * std::max(1, s.options.ctas_per_sm));
  if (const std::string why =
          PlanStepAttention(layout, m.heads, m.kv_heads, m.head_dim, max_ctas, s.plans);
      !why.empty()) {
    throw std::invalid_argument("cuda engine: attention plan: " + why);
  }
  s.decode.active = s.plans.has_decode;
  s.prefix.active = s.plans.has_prefix;
  s.prefill.active = s.plans.has_prefill;
  if (s.decode.active) s.decode.Upload(s.plans.decode, s.stream, m.heads, m.head_dim);
  if (s.prefix.active) {
    s.prefix.Upload(s.plans.prefix, s.stream, m.heads, m.head_dim);
    s.d_cascade_indptr.Upload(layout.cascade_indptr, s.stream);
  }
  if (s.prefill.active) s.prefill.Upload(s.plans.prefill, s.stream, m.heads, m.head_dim);
  LaunchEmbed(s.x.data(), s.d_row_request.data(), s.d_row_position.data(), layout.num_rows,
              s.embedding.data(), s.lm_head.data(), m.hidden, m.vocab, m.tied_embeddings, s.stream);
}

void CudaBackend::RmsNorm(Buffer in, Weight w, uint32_t layer, Buffer out, uint32_t rows) {
  State& s = *state_;
  LaunchRmsNorm(s.Data(in), s.WeightData(w, layer), s.Data(out), rows, s.model.hidden, kRmsEps,
                s.stream);
}

void CudaBackend::Linear(Buffer in, Weight w, uint32_t layer, Buffer out, uint32_t rows) {
  State& s = *state_;
  if (rows == 0) return;
  const auto [k, n] = s.WeightShape(w);
  if (s.options.bf16_weights) {
    const size_t elems = size_t{rows} * k;
    LaunchToBf16(s.Data(in), s.input16.Reserve(elems), elems, s.stream);
    s.gemm->Bf16Gemm(static_cast<int>(rows), static_cast<int>(n), static_cast<int>(k),
                     s.input16.data(), s.WeightData16(w, layer), s.Data(out), /*fp32_out=*/true);
    return;
  }
  s.gemm->Sgemm(static_cast<int>(rows), static_cast<int>(n), static_cast<int>(k), s.Data(in),
                s.WeightData(w, layer), s.Data(out));
}

void CudaBackend::RopeSplitQkv() {
  State& s = *state_;
  LaunchRopeSplit(s.qkv.data(), s.q.data(), s.k_new.data(), s.v_new.data(), s.d_row_position.data(),
                  s.step->num_rows, s.model.heads, s.model.kv_heads, s.model.head_dim, kRopeTheta,
                  s.stream);
}

void CudaBackend::AddInPlace(Buffer x, Buffer y) {
  State& s = *state_;
  LaunchAdd(s.Data(x), s.Data(y), size_t{s.step->num_rows} * s.model.hidden, s.stream);
}

void CudaBackend::SiluMul() {
  State& s = *state_;
  LaunchSiluMul(s.gate_up.data(), s.act.data(), s.step->num_rows, s.model.intermediate, s.stream);
}

void CudaBackend::AppendKv(uint32_t layer, uint32_t first, uint32_t count) {
  State& s = *state_;
  State::Layer& l = s.layers[layer];
  LaunchAppendKv(s.k_new.data(), s.v_new.data(), s.step->qo_indptr[first],
                 s.step->qo_indptr[first + count], s.d_row_entry.data(), s.d_row_position.data(),
                 s.d_kv_indptr.data(), s.d_kv_indices.data(), l.k_pool.data(), l.v_pool.data(),
                 s.dtype, s.layout.StridePage(), s.layout.StrideHead(), s.layout.block_tokens,
                 s.model.kv_heads, s.model.head_dim, s.stream);
}

void CudaBackend::DecodeAttention(uint32_t layer, bool suffix_only) {
  State& s = *state_;
  if (!s.decode.active) return;
  FEATHER_CHECK(suffix_only == (s.step->cascade_prefix_tokens > 0),
                "suffix-only decode attention without a cascade prefix (or the reverse)");
  PagedAttentionArgs a = s.Args(layer, s.decode);
  ApplyStepForm(StepForm::kDecode, *s.step, s.q_width, s.Pointers(), a);
  LaunchPagedAttention(a, s.plans.decode.geometry, s.stream);
}

void CudaBackend::CascadePrefix(uint32_t layer) {
  State& s = *state_;
  if (!s.prefix.active) return;
  PagedAttentionArgs a = s.Args(layer, s.prefix);
  ApplyStepForm(StepForm::kPrefix, *s.step, s.q_width, s.Pointers(), a);
  LaunchPagedAttention(a, s.plans.prefix.geometry, s.stream);
}

void CudaBackend::CascadeMerge() {
  State& s = *state_;
  if (!s.prefix.active) return;
  LaunchMergeStates(s.attn.data(), s.suffix_lse.data(), s.prefix_out.data(), s.prefix_lse.data(),
                    s.step->num_decode, s.model.heads, s.model.head_dim, s.stream);
}

void CudaBackend::PrefillAttention(uint32_t layer) {
  State& s = *state_;
  if (!s.prefill.active) return;
  PagedAttentionArgs a = s.Args(layer, s.prefill);
  ApplyStepForm(StepForm::kPrefill, *s.step, s.q_width, s.Pointers(), a);
  LaunchPagedAttention(a, s.plans.prefill.geometry, s.stream);
}

void CudaBackend::GatherSampledRows() {
  State& s = *state_;
  LaunchGather(s.sampled.data(), s.x.data(), s.d_sampled_row.data(), s.requests, s.model.hidden,
               s.stream);
}

void CudaBackend::Argmax() {
  State& s = *state_;
  LaunchArgmax(s.logits.data(), s.argmax.data(), s.requests, s.model.vocab, s.stream);
}

void CudaBackend::Synchronize() { FEATHER_CUDA_CHECK(cudaStreamSynchronize(state_->stream)); }

const PagedKvLayout& CudaBackend::kv_layout() const { return state_->layout; }
int CudaBackend::sm_count() const { return state_->device.sm_count; }
size_t CudaBackend::weight_bytes() const { return state_->weight_bytes; }
size_t CudaBackend::kv_bytes() const { return state_->kv_bytes; }

std::span<const float> CudaBackend::logits() {
  State& s = *state_;
  if (s.requests == 0) return {};
  s.host_logits.resize(size_t{s.requests} * s.model.vocab);
  FEATHER_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  FEATHER_CUDA_CHECK(cudaMemcpy(s.host_logits.data(), s.logits.data(),
                                s.host_logits.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return s.host_logits;
}

std::span<const uint32_t> CudaBackend::argmax() {
  State& s = *state_;
  if (s.requests == 0) return {};
  s.host_argmax.resize(s.requests);
  FEATHER_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  FEATHER_CUDA_CHECK(cudaMemcpy(s.host_argmax.data(), s.argmax.data(),
                                s.host_argmax.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost));
  return s.host_argmax;
}

}  // namespace feather::hw::cuda
