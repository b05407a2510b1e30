// selfcheck.cc: RunCudaSelfcheck (see selfcheck.h).
#include "hw/cuda/selfcheck.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "base/rng.h"
#include "hw/cpu_engine.h"
#include "hw/cuda/attention_cases.h"
#include "hw/cuda/attention_emulation.h"
#include "hw/cuda/attention_kernels.h"
#include "hw/cuda/cuda_check.h"
#include "hw/cuda/cuda_engine.h"
#include "hw/cuda/cupti_profiler.h"
#include "hw/cuda/datasheet.h"
#include "hw/cuda/gemm_cublas.h"
#include "hw/cuda/gpu_probes.h"
#include "hw/gemm.h"
#include "hw/paged_kv.h"
#include "hw/synthetic_batch.h"

namespace feather::hw::cuda {
namespace {

// Device allocations freed together.
class Arena {
 public:
  Arena() = default;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena() {
    for (void* p : blocks_) cudaFree(p);
  }
  template <typename T>
  T* Upload(const std::vector<T>& host) {
    T* device = Alloc<T>(host.size());
    if (!host.empty()) {
      FEATHER_CUDA_CHECK(
          cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    }
    return device;
  }
  template <typename T>
  T* Alloc(size_t count) {
    void* p = nullptr;
    FEATHER_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)));
    blocks_.push_back(p);
    FEATHER_CUDA_CHECK(cudaMemset(p, 0, std::max<size_t>(count, 1) * sizeof(T)));
    return static_cast<T*>(p);
  }
  template <typename T>
  std::vector<T> Download(const T* device, size_t count) {
    std::vector<T> host(count);
    FEATHER_CUDA_CHECK(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  std::vector<void*> blocks_;
};

// Runs the case's plans; decode_kernel false forces the general kernel for every plan.
CaseOutput RunCaseOnDevice(const AttentionCase& c, bool decode_kernel) {
  const AttentionCaseShape& s = c.shape;
  const std::vector<AttentionPlan> plans = PlanAttentionCase(c);
  Arena arena;
  const float* q = arena.Upload(c.q);
  const void* k_pool = arena.Upload(c.k_kernel);
  const void* v_pool = arena.Upload(c.v_kernel);
  const size_t out_elems = size_t{c.num_rows} * s.num_heads * s.head_dim;
  const size_t lse_elems = size_t{c.num_rows} * s.num_heads;
  std::vector<float*> outs, lses;
  for (size_t i = 0; i < plans.size(); ++i) {
    const AttentionPlan& plan = plans[i];
    PagedAttentionArgs a = CaseArgs(c, plan, i, nullptr, nullptr, nullptr, nullptr);
    const bool prefix_pass = s.form == AttentionForm::kCascade && i == 0;
    a.q = q;
    a.k_pool = k_pool;
    a.v_pool = v_pool;
    a.kv_indptr = arena.Upload(prefix_pass ? c.prefix_indptr : c.kv_indptr);
    a.kv_indices = arena.Upload(prefix_pass ? c.prefix_indices : c.kv_indices);
    a.out = arena.Alloc<float>(out_elems);
    a.lse = arena.Alloc<float>(lse_elems);
    a.partial_out = arena.Alloc<float>(size_t{plan.num_slots} * s.num_heads * s.head_dim);
    a.partial_lse = arena.Alloc<float>(size_t{plan.num_slots} * s.num_heads);
    a.items = arena.Upload(plan.items);
    a.row_list = arena.Upload(plan.row_list);
    a.merge_rows = arena.Upload(plan.merge_rows);
    a.merge_indptr = arena.Upload(plan.merge_indptr);
    a.merge_slots = arena.Upload(plan.merge_slots);
    a.decode_kernel = decode_kernel;
    LaunchPagedAttention(a, plan.geometry, nullptr);
    outs.push_back(a.out);
    lses.push_back(a.lse);
  }
  if (s.form == AttentionForm::kCascade) {
    LaunchMergeStates(outs[1], lses[1], outs[0], lses[0], c.num_rows, s.num_heads, s.head_dim,
                      nullptr);
  }
  FEATHER_CUDA_CHECK(cudaDeviceSynchronize());
  CaseOutput result;
  result.out = arena.Download(outs.back(), out_elems);
  result.lse = arena.Download(lses.back(), lse_elems);
  return result;
}

class Reporter {
 public:
  Reporter(std::ostream& out, SelfcheckStamp& stamp) : out_(out), stamp_(stamp) {}

  // Runs `check`, which fills error / tolerance / detail and returns passed; a throw is a FAIL.
  // `figure` and `bound` name the two numbers on the printed line: a kernel check prints its
  // error and tolerance, a probe its measured figure and the datasheet's.
  void Run(const std::string& kernel, const std::function<bool(SelfcheckResult&)>& check,
           const char* figure = "error", const char* bound = "tolerance") {
    SelfcheckResult r;
    r.kernel = kernel;
    try {
      r.passed = check(r);
    } catch (const std::exception& e) {
      r.passed = false;
      r.detail = e.what();
      cudaGetLastError();  // clear a sticky launch error so later checks can run
    }
    char line[512];
    std::snprintf(line, sizeof line, "%s  %-60s %s %.3g (%s %.3g)%s%s", r.passed ? "PASS" : "FAIL",
                  kernel.c_str(), figure, r.max_abs_error, bound, r.tolerance,
                  r.detail.empty() ? "" : "  ", r.detail.c_str());
    out_ << line << '\n' << std::flush;
    stamp_.results.push_back(r);
  }
  void Skip(const std::string& kernel, const std::string& why) {
    out_ << "SKIP  " << kernel << "  " << why << '\n';
  }

 private:
  std::ostream& out_;
  SelfcheckStamp& stamp_;
};

std::vector<float> RandomVector(Rng& rng, size_t n) {
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(2 * rng.NextDouble() - 1);
  return v;
}

}  // namespace

SelfcheckStamp RunCudaSelfcheck(const CudaDeviceInfo& device, std::ostream& out) {
  SelfcheckStamp stamp;
  stamp.device_name = device.name;
  stamp.device_uuid = device.uuid;
  out << "feather selfcheck --target cuda on " << device.name << " (sm_" << device.cc_major
      << device.cc_minor << ", " << device.sm_count << " SMs, " << device.uuid << ")\n";
  FEATHER_CUDA_CHECK(cudaSetDevice(device.device));
  Reporter report(out, stamp);

  // Each case as the engine runs it; a case with a one-row-per-item plan (where the decode kernel
  // may run) once more with the general kernel forced, so that both kernels are checked.
  for (const AttentionCaseShape& shape : StandardAttentionCases()) {
    const AttentionCase c = MakeAttentionCase(shape);
    const std::vector<AttentionPlan> plans = PlanAttentionCase(c);
    const bool one_row_plan = std::any_of(plans.begin(), plans.end(), [](const AttentionPlan& p) {
      return p.geometry.rows_per_item == 1;
    });
    for (const bool decode_kernel : {true, false}) {
      if (!decode_kernel && !one_row_plan) continue;
      const std::string label = "attention " + shape.Name() + (decode_kernel ? "" : " general");
      report.Run(label, [&](SelfcheckResult& r) {
        const CaseError error = CompareToExpected(c, RunCaseOnDevice(c, decode_kernel));
        r.max_abs_error = error.max_abs_error;
        r.tolerance = kCaseAbsTolerance;
        r.detail = error.first_failure;
        return error.worst_excess <= 0;
      });
    }
  }

  report.Run("merge states (cascade)", [&](SelfcheckResult& r) {
    constexpr uint32_t kRows = 37, kHeads = 5, kDim = 128;
    Rng rng(11);
    std::vector<float> out_a = RandomVector(rng, size_t{kRows} * kHeads * kDim);
    std::vector<float> out_b = RandomVector(rng, out_a.size());
    std::vector<float> lse_a = RandomVector(rng, size_t{kRows} * kHeads);
    std::vector<float> lse_b = RandomVector(rng, lse_a.size());
    lse_a[3] = -HUGE_VALF;
    lse_b[4] = -HUGE_VALF;
    Arena arena;
    float* da = arena.Upload(out_a);
    float* la = arena.Upload(lse_a);
    LaunchMergeStates(da, la, arena.Upload(out_b), arena.Upload(lse_b), kRows, kHeads, kDim,
                      nullptr);
    FEATHER_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> got = arena.Download(da, out_a.size());
    const std::vector<float> got_lse = arena.Download(la, lse_a.size());
    EmulateMergeStates(out_a.data(), lse_a.data(), out_b.data(), lse_b.data(), kRows, kHeads, kDim);
    for (size_t i = 0; i < got.size(); ++i) {
      r.max_abs_error = std::max(r.max_abs_error, double{std::fabs(got[i] - out_a[i])});
    }
    for (size_t i = 0; i < got_lse.size(); ++i) {
      if (std::isinf(lse_a[i]) || std::isinf(got_lse[i])) {
        if (got_lse[i] != lse_a[i]) r.max_abs_error = HUGE_VAL;
        continue;
      }
      r.max_abs_error = std::max(r.max_abs_error, double{std::fabs(got_lse[i] - lse_a[i])});
    }
    r.tolerance = 1e-6;
    return r.max_abs_error <= r.tolerance;
  });

  for (const auto& [m, n, k] :
       {std::tuple{1, 33, 65}, std::tuple{7, 1536, 1024}, std::tuple{129, 257, 63}}) {
    report.Run(
        "sgemm cuBLAS " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k),
        [&, m = m, n = n, k = k](SelfcheckResult& r) {
          Rng rng(static_cast<uint64_t>(m * 131 + n));
          const auto sm = static_cast<size_t>(m), sn = static_cast<size_t>(n),
                     sk = static_cast<size_t>(k);
          const std::vector<float> a = RandomVector(rng, sm * sk);
          const std::vector<float> b = RandomVector(rng, sk * sn);
          std::vector<float> want(sm * sn);
          Gemm(DefaultGemmBackend(), static_cast<uint32_t>(m), static_cast<uint32_t>(n),
               static_cast<uint32_t>(k), a.data(), b.data(), want.data(), 1);
          Arena arena;
          float* c = arena.Alloc<float>(sm * sn);
          {
            CublasGemm gemm(nullptr);
            gemm.Sgemm(m, n, k, arena.Upload(a), arena.Upload(b), c);
            FEATHER_CUDA_CHECK(cudaDeviceSynchronize());
          }
          const std::vector<float> got = arena.Download(c, sm * sn);
          for (size_t i = 0; i < got.size(); ++i) {
            r.max_abs_error = std::max(r.max_abs_error, double{std::fabs(got[i] - want[i])});
          }
          r.tolerance = 1e-5 * k;
          return r.max_abs_error <= r.tolerance;
        });
  }

  // Both output types: bf16 (the FLOP probe's) and fp32 (the layers of bf16-weight engines).
  for (const bool fp32_out : {false, true}) {
    const std::string name =
        std::string("bf16 gemm cuBLASLt 64x96x128") + (fp32_out ? " fp32 out" : "");
    report.Run(name, [&](SelfcheckResult& r) {
      constexpr int kM = 64, kN = 96, kK = 128;
      Rng rng(5);
      std::vector<uint16_t> a(kM * kK), b(kK * kN);
      for (uint16_t& x : a) x = FloatToBf16(static_cast<float>(2 * rng.NextDouble() - 1));
      for (uint16_t& x : b) x = FloatToBf16(static_cast<float>(2 * rng.NextDouble() - 1));
      Arena arena;
      void* c = fp32_out ? static_cast<void*>(arena.Alloc<float>(kM * kN))
                         : static_cast<void*>(arena.Alloc<uint16_t>(kM * kN));
      {
        CublasGemm gemm(nullptr);
        gemm.Bf16Gemm(kM, kN, kK, arena.Upload(a), arena.Upload(b), c, fp32_out);
        FEATHER_CUDA_CHECK(cudaDeviceSynchronize());
      }
      std::vector<float> got(kM * kN);
      if (fp32_out) {
        got = arena.Download(static_cast<const float*>(c), kM * kN);
      } else {
        const std::vector<uint16_t> raw = arena.Download(static_cast<const uint16_t*>(c), kM * kN);
        for (size_t i = 0; i < raw.size(); ++i) got[i] = Bf16ToFloat(raw[i]);
      }
      double worst = 0, largest = 0;
      for (int i = 0; i < kM; ++i) {
        for (int j = 0; j < kN; ++j) {
          double want = 0;
          for (int p = 0; p < kK; ++p) {
            want += double{Bf16ToFloat(a[static_cast<size_t>(i * kK + p)])} *
                    Bf16ToFloat(b[static_cast<size_t>(p * kN + j)]);
          }
          const double err = std::fabs(got[static_cast<size_t>(i * kN + j)] - want);
          largest = std::max(largest, err);
          worst = std::max(worst, err / (1 + std::fabs(want)));
        }
      }
      // bf16 output rounds to 8 significant bits, so the error grows with |want|: the check (and
      // the figure printed) is relative to 1 + |want|. With fp32 output only the fp32
      // accumulation rounds (the products of bf16 values are exact in fp32).
      r.max_abs_error = worst;
      r.tolerance = fp32_out ? 1e-4 : 1e-2;
      char detail[96];
      std::snprintf(detail, sizeof detail, "relative to 1 + |reference|; largest absolute %.3g",
                    largest);
      r.detail = detail;
      return worst <= r.tolerance;
    });
  }

  // The whole model step: engine: cuda against engine: cpu on the same plan (decode with a
  // shared prefix, cascade on, and prefill chunks), fp32 KV, same weights (hw/weight_init.h):
  // fp32 weights to rounding; bf16 weights (the same values rounded, activations rounded at each
  // product) within a tolerance sized for bf16, which a wrong layout or operand would exceed by
  // far (its error would be of the logits' own scale).
  for (const bool bf16_weights : {false, true}) {
    const std::string name = std::string("engine cuda vs cpu: logits of a 2-layer model step") +
                             (bf16_weights ? ", bf16 weights" : "");
    report.Run(name, [&](SelfcheckResult& r) {
      ModelConfig model;
      model.name = "selfcheck-tiny";
      model.layers = 2;
      model.hidden = 256;
      model.heads = 8;
      model.kv_heads = 2;
      model.head_dim = 64;
      model.intermediate = 512;
      model.vocab = 1000;
      model.dtype_bytes = 4;
      SyntheticBatchSpec spec;
      spec.decode_requests = 9;
      spec.groups = 1;
      spec.shared_prefix_tokens = 96;
      spec.suffix_tokens = 40;
      spec.suffix_jitter_tokens = 39;
      spec.prefill_requests = 2;
      spec.prefill_context_tokens = 33;
      spec.prefill_chunk_tokens = 17;
      const SyntheticBatch batch = MakeSyntheticBatch(spec);
      CpuEngine cpu(model, batch.pool_blocks, 16, CpuEngineOptions{.num_threads = 1});
      CudaEngineOptions options;
      options.backend.bf16_weights = bf16_weights;
      CudaEngine gpu(model, batch.pool_blocks, 16, options);
      (void)cpu.Execute(batch.plan);
      (void)gpu.Execute(batch.plan);
      const auto want = cpu.last_logits();
      const auto got = gpu.last_logits();
      if (got.size() != want.size() || want.empty()) {
        r.detail = "logits sizes differ: " + std::to_string(got.size()) + " vs " +
                   std::to_string(want.size());
        return false;
      }
      double scale = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        scale = std::max(scale, double{std::fabs(want[i])});
        r.max_abs_error = std::max(r.max_abs_error, double{std::fabs(got[i] - want[i])});
      }
      r.tolerance = (bf16_weights ? 3e-2 : 1e-3) * (1 + scale);
      r.detail = "cascade " + std::string(gpu.last_shape().cascade() ? "used" : "not used");
      return r.max_abs_error <= r.tolerance;
    });
  }

  const auto sheet = FindDatasheet(device.name);
  const size_t probe_bytes = size_t{512} << 20;
  const GpuProbeResult copy = MeasureCopyBandwidth(probe_bytes, 10);
  const GpuProbeResult read = MeasureReadBandwidth(probe_bytes, 10);
  const GpuProbeResult flops = MeasureBf16GemmTflops(8192, 5);
  out << "probes: copy " << copy.best << " GB/s (median " << copy.median << "), read " << read.best
      << " GB/s (median " << read.median << "), bf16 GEMM " << flops.best << " TFLOP/s (median "
      << flops.median << ")\n";
  if (!sheet) {
    report.Skip("probes vs datasheet",
                "no datasheet row for '" + device.name + "' (reported only)");
  } else {
    for (const auto& [what, measured, datasheet, floor] :
         {std::tuple{"copy GB/s", copy.best, sheet->dram_gb_per_s, kBandwidthFloor},
          std::tuple{"read GB/s", read.best, sheet->dram_gb_per_s, kBandwidthFloor},
          std::tuple{"bf16 GEMM TFLOP/s", flops.best, sheet->bf16_dense_tflops, kFlopsFloor}}) {
      report.Run(
          std::string("probe ") + what,
          [&, what = what, measured = measured, datasheet = datasheet,
           floor = floor](SelfcheckResult& r) {
            r.max_abs_error = measured;
            r.tolerance = datasheet;
            r.detail = CheckAgainstDatasheet(what, measured, datasheet, floor);
            if (r.detail.empty()) {
              char share[64];
              std::snprintf(share, sizeof share, "%.0f %% of the datasheet",
                            100 * measured / datasheet);
              r.detail = share;
              return true;
            }
            return false;
          },
          "measured", "datasheet");
    }
  }

  report.Run(
      "cupti dram bytes + L2 hit rate (read probe)",
      [&](SelfcheckResult& r) {
        const size_t bytes = size_t{512} << 20;
        CuptiRangeProfiler profiler;
        const CuptiCounters counters =
            profiler.Measure("read probe", [&] { (void)MeasureReadBandwidth(bytes, 1); });
        // The probe reads its buffer twice per call (warm-up and one repetition); its cudaMemset
        // writes, which dram__bytes_read does not count.
        const double ratio = counters.dram_bytes_read / (2.0 * static_cast<double>(bytes));
        r.max_abs_error = ratio;
        r.tolerance = 1.10;
        r.detail = "dram bytes / bytes read = " + std::to_string(ratio) + ", L2 hit rate " +
                   std::to_string(counters.l2_hit_rate);
        return ratio >= 0.95 && ratio <= 1.10 && counters.l2_hit_rate >= 0 &&
               counters.l2_hit_rate <= 1;
      },
      "dram/read", "allowed 0.95 to");

  stamp.passed = !stamp.results.empty();
  for (const SelfcheckResult& r : stamp.results) stamp.passed = stamp.passed && r.passed;
  return stamp;
}

}  // namespace feather::hw::cuda
