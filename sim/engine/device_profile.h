// device_profile.h: the hardware numbers the cost model reads, with where each came from.
//
// A DeviceProfile has one field per parameter of the step-time model (sim/engine/model_engine.h) and
// of the KV pool size (KvCacheBlocks), and besides them only metadata (names, provenance, the
// calibration sections), so that a calibration fit (calib/) can fill the fields one to one. Each
// parameter carries its provenance: `spec` (a public datasheet figure), `assumed` (a typical value
// no datasheet gives, to be replaced by calibration), `measured` (written by calibration) or
// `published` (written by a refit on published measurements, calib/published_rows.h).
// Shipped profiles: results/profiles/*.yaml (schema in results/profiles/README.md).
//
// ProfileParameters() lists the parameters in a fixed order with their valid ranges; the loader
// and the writer (DeviceProfileToYaml) both walk that table. A profile written by calibration
// also carries three optional sections: `measured_on` (machine, build, kernel variant), `fit`
// (the fit errors, overall and per cost-model term) and `step_noise` (the repetitions' spread per
// term). Loading and writing are O(file size), and
// ParseDeviceProfile(DeviceProfileToYaml(p)) == p for every profile the loader accepts.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace feather {

// kPublished: fitted to measurements someone else published (calib/published_rows.h), the rows
// named in the note; nothing of it was measured by this project.
enum class ParameterSource : uint8_t { kSpec, kAssumed, kMeasured, kPublished };
[[nodiscard]] std::string_view ParameterSourceName(ParameterSource source);  // spec|assumed|...

inline constexpr size_t kNumProfileParameters = 26;

// The `measured_on` section: where and how the measurements behind a calibrated profile ran.
struct ProfileMeasuredOn {
  std::string host;       // host name
  std::string cpu_model;  // e.g. "AMD EPYC 7B13" (the host CPU also for a GPU calibration)
  std::string date_utc;   // ISO 8601 UTC, exactly YYYY-MM-DDTHH:MM:SSZ
  struct Build {
    std::string compiler;    // e.g. "GNU 12.2.0"
    std::string build_type;  // CMAKE_BUILD_TYPE, e.g. "Release"
    std::string git_rev;     // short git revision, "unknown" outside git
    friend bool operator==(const Build&, const Build&) = default;
  } build;
  std::string kernel_variant;  // e.g. "avx2+fma, openmp 2 threads, gemm=blas"
  uint32_t threads = 1;        // threads the engine ran with (>= 1)
  // The machine's identity beyond its CPU name, for telling a foreign host apart (two VMs of one
  // family can differ 2x in bandwidth): 0 = not recorded (profiles written before 2026-11-24).
  uint32_t usable_cpus = 0;          // CPUs of the calibrating process's affinity mask
  // The CPU's vendor, family and model (hw/host_info.h CpuSignatureOf), e.g. "AuthenticAMD
  // family 25 model 17": a VM's cpu_model ("AMD EPYC") has named three CPU generations here.
  // Empty = not recorded (profiles before 2026-12-01).
  std::string cpu_signature = {};
  uint64_t l3_cache_bytes = 0;       // last-level cache
  double read_bw_bytes_per_s = 0;    // the host DRAM read probe (hw/probes.h) at calibration
  // The probe settings calibration used (hw/probes.h): "full" or "quick" (`calibrate --quick`:
  // shorter bandwidth runs, GEMM peak over 256 and 512 only, which reads lower than the full
  // probe's 512-1536). `validate` probes the host with the same settings, so that its ratios to
  // the profile compare like with like. Empty = not recorded (profiles before 2026-11-25; read
  // as "full").
  std::string probes = {};
  // The CPU kernels' prefetch lookahead calibration measured fastest and ran with
  // (hw/decode_prefetch_tuning.h); the CPU engine applies it when it runs with this profile.
  // 0 = not recorded (profiles before 2026-11-28, GPU profiles): the kernels' default.
  uint64_t decode_prefetch_bytes = 0;
  // How the CPU engine held its linear layers' weights: "packed" (column panels, every product by
  // the packed skinny kernel, hw/gemm.h PackedB) or "row-major" (Eigen's product, with the
  // skinny kernel up to gemm_skinny_max_tokens). Empty = not recorded (profiles before
  // 2026-11-29, GPU profiles): row-major. The CPU engine holds them as the profile says.
  std::string gemm_weights = {};
  // How calibration ordered its timed runs (calib/harness.h HarnessOptions::primed): "primed"
  // (each row timed right after an untimed run of the same step, as serving runs like after
  // like) or "interleaved" (after the previous grid point). Empty = not recorded (profiles
  // before 2026-11-29): interleaved. validate's step probe times its steps the same way.
  std::string row_order = {};
  // The slowest DRAM read probe calibration took (before its grid and after each timed pass),
  // beside read_bw_bytes_per_s, the fastest: the range one machine's probe moved in within one
  // calibration. A shared VM's moved x0.57-1.0 within five minutes here (2026-12-04,
  // results/validation/issue-20-zen4-1204), as far apart as two different VMs of one family, so
  // the foreign-host check (hw/foreign_host.h) asks whether this host's read lies near the
  // range, not near its top. 0 = not recorded (profiles before 2026-12-04): the range is
  // read_bw_bytes_per_s alone.
  double read_bw_low_bytes_per_s = 0;
  // Tokens per KV page of the engine calibration timed (`calibrate --block-tokens`): the decode
  // and cascade kernels read each page's K and V as runs of block_tokens · head_dim elements a kv
  // head, and how fast a scattered walk reads depends on that run (hw/README.md, "Page size").
  // 0 = not recorded (profiles before 2026-12-07): 16, the only size calibration ran before.
  uint32_t block_tokens = 0;
  friend bool operator==(const ProfileMeasuredOn&, const ProfileMeasuredOn&) = default;
};

// The `fit` section: how well the calibrated parameters reproduce the measured steps. MAPEs are
// fractions (0.02 = 2%): mean |predicted − measured| / measured over the rows. The holdout MAPE
// is present exactly when holdout rows are (rows the fit did not see). holdout_noise_floor, where
// the calibration kept every repetition of its rows: the holdout MAPE a model that priced each
// row's true median exactly would still show, since each row is the median of a few noisy
// repetitions (calib/fit.h FitOptions::repetitions says how it is estimated). A holdout MAPE
// near it is the machine's noise; one well above it is the model's.
struct ProfileTermFit {
  std::string term;  // StepTermName: gemm | decode_attention | cascade_prefix | ...
  double mape = 0;   // on the rows the term was fitted on
  std::optional<double> holdout_mape;
  uint64_t rows = 0;  // fit rows that informed the term
  uint64_t holdout_rows = 0;
  std::optional<double> holdout_noise_floor;  // only with holdout_mape
  friend bool operator==(const ProfileTermFit&, const ProfileTermFit&) = default;
};
struct ProfileFit {
  double fit_mape = 0;  // of the whole step time (total_ns), on the fit rows
  std::optional<double> holdout_mape;
  uint64_t fit_rows = 0;
  uint64_t holdout_rows = 0;
  std::optional<double> holdout_noise_floor;  // only with holdout_mape
  std::vector<ProfileTermFit> terms;  // the terms that had rows, in StepTerm order
  friend bool operator==(const ProfileFit&, const ProfileFit&) = default;
};

// The `step_noise` section: how much the same step's terms vary from one execution to the next
// on the calibrating machine, so that a validation can predict a spread instead of a point
// (sim/engine/step_noise.h draws step-time noise from it; `feather validate --repeat N`).
//
// Calibration runs every step R times in interleaved passes (hw/interleaved_passes.h); for each
// term and each step whose median repetition spent time in it, the R ratios
// r = repetition's term ns / median repetition's term ns − 1 are pooled over the steps:
// rel_stdev = (p84 − p16) / 2 of them, the stdev a normal spread with those quantiles has;
// rms = sqrt(mean r²); p05/p95 their 5th and 95th percentiles. A term no step spent time in is
// absent. rel_stdev is what a model run draws from (sim/engine/step_noise.h); it is robust to
// the rare repetition a busy shared machine stretches 10–100× (a descheduled thread), which
// rms and p95 keep on record (on a loaded 2-core VM: gemm rel_stdev 0.03, rms 1.3). This is the
// machine's step-to-step noise, not the model's error (that is `fit`).
//
// drift_rel_stdev: the part of that spread a whole run shares. Per timed pass k, the median over
// the steps of r (a pass runs every step once, so its median is how fast the machine was during
// that pass: tens of seconds, the length of a validation run); drift_rel_stdev is the sample
// stdev of those R medians (0 with one pass, or when the profile predates the key). A model run
// draws one such factor for its whole run and the rest of rel_stdev per step
// (sim/engine/step_noise.h), so slow drift of the machine — a shared VM's DRAM bandwidth moved by
// a third within minutes here — widens the predicted spread of a run's totals, which i.i.d.
// per-step noise averages away. It reads slightly high: each pass median carries a sampling
// error of about 1.25 · rel_stdev / √steps (0.008 at 0.1 over 245 steps). Five passes give a
// rough estimate (its own relative error about 35 %).
struct ProfileTermNoise {
  std::string term;      // ProfileFitTermNames() (decode_attention includes kv_reuse)
  double rel_stdev = 0;  // >= 0: (p84 − p16) / 2
  double rms = 0;        // >= 0: sqrt(mean r²), outliers included
  double p05 = 0;        // >= -1
  double p95 = 0;        // >= p05
  uint64_t samples = 0;  // pooled ratios (steps × repetitions), >= 1
  double drift_rel_stdev = 0;  // >= 0: stdev over the passes of the pass's median r (above)
  friend bool operator==(const ProfileTermNoise&, const ProfileTermNoise&) = default;
};
struct ProfileStepNoise {
  ParameterSource source = ParameterSource::kMeasured;
  std::string note;      // how it was measured
  uint64_t steps = 0;        // measured steps
  uint64_t repetitions = 0;  // timed repetitions of each
  std::vector<ProfileTermNoise> terms;  // StepTerm order
  friend bool operator==(const ProfileStepNoise&, const ProfileStepNoise&) = default;
};

// The terms `fit.terms` may name, in StepTerm order (kv_reuse is part of decode_attention for
// calibration: a real engine cannot time it apart).
[[nodiscard]] std::span<const std::string_view> ProfileFitTermNames();

struct DeviceProfile {
  std::string name;    // short name, e.g. "rtx6000-ada"
  std::string device;  // marketing name of the device
  std::string notes;
  std::vector<std::string> provenance;  // sources of the figures (datasheets, calibration fits)

  // --- Capacity (KvCacheBlocks) ---
  double memory_bytes = 0;              // device memory capacity
  double activation_reserve_bytes = 0;  // activations, CUDA graphs, workspaces: not KV

  // --- Datasheet peaks ---
  double dram_bw_bytes_per_s = 0;  // HBM / GDDR peak bandwidth
  double dense_flops_per_s = 0;    // dense 16-bit tensor-core peak (FP32 accumulate)
  double sm_count = 0;             // streaming multiprocessors (vLLM's cascade heuristic)

  // The read bandwidth of the linear layers' own working set: an array of the model's step
  // weights (ModelConfig::StepWeightBytes) read over and over, several streams a thread, as
  // decode steps read them. 0 (on GPUs, and in profiles written before it): the weights stream
  // at dram_bw_bytes_per_s. On a GPU they do: gigabytes of weights against tens of MiB of L2,
  // and dram_bw is the datasheet's peak. On a CPU the DRAM probe (one stream a thread, an array
  // 8x the LLC) under-reads the weight stream: on two Intel Xeon VMs the fit wanted
  // gemm_bw_efficiency 1.25 of it (results/validation/issue-20-xeon-amx-1202), since one stream
  // a core keeps too few lines in flight and an LLC of the weights' order holds part of them
  // from step to step (calib/cpu_calibration.h RunProbes). Optional
  // (absent = 0); measured by `calibrate --target cpu` for the model it calibrates with, so a
  // profile used with a model of other weight bytes prices that model's stream at this rate too.
  double weight_stream_bw_bytes_per_s = 0;

  // --- Achieved fractions of the peaks ---
  double gemm_bw_efficiency = 0;     // weight streaming of the linear layers, of WeightStreamBw
  double gemm_flops_efficiency = 0;  // compute-bound linear layers
  // Fixed cost of a linear-layer pass over 2 or more tokens, on the compute side of the GEMM
  // roofline. CPU GEMM libraries (Eigen, OpenBLAS) repack every weight matrix on each call with
  // m ≥ 2, while one token goes through GEMV and streams the weights once; 0 on GPUs. Optional
  // in profile files (absent = 0).
  double gemm_batched_fixed_ns = 0;
  // A CPU build's skinny GEMM kernel (hw/gemm.h) takes the products of 2 to gemm_skinny_max_tokens
  // tokens: it streams the weights once with no repacking, and costs the weight stream plus
  // gemm_skinny_fixed_ns plus gemm_skinny_ns_per_token a token (sim/engine/model_engine.h). 0
  // tokens: no such kernel (GPUs; CPU profiles calibrated without it). Optional (absent = 0).
  double gemm_skinny_max_tokens = 0;
  double gemm_skinny_fixed_ns = 0;
  double gemm_skinny_ns_per_token = 0;
  // How sharply the gemm roofline turns from the weight stream W to the compute C: the term is
  // (W^k + C^k)^(1/k), a soft maximum (k → ∞ is max(W, C); k = 1 their sum). A GPU GEMM does
  // not overlap its weight stream with its math perfectly near the knee: Vidur's H100 and A100
  // tables (Llama-2-7B, TP 1) sit up to 2x above the hard max around it. 0 = the hard max (the
  // value a profile without the key has).
  double gemm_roofline_exponent = 0;
  double attn_bw_efficiency = 0;     // attention KV reads and writes from DRAM
  double attn_flops_efficiency = 0;  // compute-bound attention (prefill, cascade prefix pass)
  // Fixed cost of decode attention per (decode sequence, KV head, layer): one flash-decoding
  // CTA's prologue, pipeline fill and epilogue, paid however short the context. Why published
  // efficiencies grow with context (FlashAttention-2 paged decode on H100: 23 % of peak at 32
  // tokens, 66 % at 512). Optional (absent = 0).
  double decode_cta_fixed_ns = 0;
  // Fixed cost of prefill attention per (prefill query token, query head, layer), beyond the
  // (query, key) pairs that attn_flops_efficiency prices: loading and scaling the query row,
  // normalizing and storing its output, the causal diagonal tile that is half wasted, and
  // appending the token's K and V to the paged cache (the cpu engine times AppendKv inside the
  // prefill term, hw/layer_loop.cc). Pairs alone cannot price a short chunk: on cpu-small a
  // 16-token prompt with no context (136 pairs a head) took 0.22 ms where its pairs, at the
  // rate the long chunks fit, predict 0.03 ms. Fitting it took the prefill term's held-out MAPE
  // from 8.0-17.2 % to 2.1-10.4 % on the twelve committed CPU row sets, 75-165 ns a row
  // (results/validation/issue-20-prefill-query). 0 in the GPU profiles (no published prefill
  // row informs it) and in profiles written before it. Optional (absent = 0).
  double prefill_query_fixed_ns = 0;
  // Fixed cost of a step's decode attention per layer, however few the requests: the parallel
  // region the CPU kernel forks and joins each layer (hw/decode_attention.cc), the K/V append,
  // a GPU's kernel launches. Why decode steps of 1-4 short requests ran 22-42 % above their
  // price on the CPU while 64-request steps ran 8-12 % under it: the per-request costs had
  // absorbed it. Fitted at 6-34 µs a layer, it took decode attention's held-out MAPE down by
  // 0.7-4.0 points on 27 of the 28 committed calibrations of unloaded CPUs, flat on the other
  // (results/validation/issue-20-decode-layer). Optional (absent = 0).
  double decode_layer_fixed_ns = 0;

  // --- Reuse of shared KV blocks through L2 without cascade ---
  double l2_bw_bytes_per_s = 0;  // effective bandwidth of KV reads served by L2
  double reuse_hit_max = 0;      // fraction of in-window repeat reads that hit L2
  double reuse_window_ctas = 0;  // decode-attention CTAs whose reads meet in L2 (a window)

  // --- Cascade attention ---
  double cascade_layer_ns = 0;                    // extra kernels (prefix pass, merge) per layer
  double cascade_merge_ns_per_request_layer = 0;  // merge work per request and layer

  // --- Fixed costs ---
  double step_fixed_ns = 0;   // per step: input preparation, sampling, launch gaps
  double layer_fixed_ns = 0;  // per layer and step: kernels outside CUDA graphs
  double per_request_ns = 0;  // per request and step: bookkeeping, sampling, output

  struct Origin {
    ParameterSource source = ParameterSource::kAssumed;
    std::string note;
    friend bool operator==(const Origin&, const Origin&) = default;
  };
  std::array<Origin, kNumProfileParameters> origins{};  // in ProfileParameters() order

  // --- Calibration metadata (absent in hand-written profiles) ---
  std::optional<ProfileMeasuredOn> measured_on;
  std::optional<ProfileFit> fit;
  std::optional<ProfileStepNoise> step_noise;

  friend bool operator==(const DeviceProfile&, const DeviceProfile&) = default;
};

// One parameter of the profile: its YAML key, its field, and the range the loader enforces.
struct ProfileParameterInfo {
  std::string_view name;
  double DeviceProfile::*field;
  double min;
  bool min_exclusive;  // true: value > min; false: value >= min
  double max;          // inclusive
  bool integer;
  std::string_view meaning;
  // Whether a profile file may leave the parameter out; it is then 0, source `assumed`.
  bool optional = false;
};
[[nodiscard]] std::span<const ProfileParameterInfo> ProfileParameters();

// The bandwidth the linear layers' weights stream at before gemm_bw_efficiency:
// weight_stream_bw_bytes_per_s where the profile has one, else dram_bw_bytes_per_s.
[[nodiscard]] inline double WeightStreamBw(const DeviceProfile& p) {
  return p.weight_stream_bw_bytes_per_s > 0 ? p.weight_stream_bw_bytes_per_s
                                            : p.dram_bw_bytes_per_s;
}

}  // namespace feather
