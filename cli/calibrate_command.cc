// calibrate_command.cc: `feather calibrate --target cpu` (see calibrate_command.h).
#include "cli/calibrate_command.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <memory>
#include <numeric>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "calib/fit.h"
#include "calib/rows_csv.h"
#include "cli/atomic_file.h"
#include "cli/interrupt.h"
#include "hw/attention_internal.h"
#include "hw/cpu_engine.h"
#include "hw/gemm.h"
#include "hw/host_info.h"
#include "hw/interleaved_passes.h"
#include "hw/probes.h"
#include "hw/synthetic_batch.h"
#include "sim/engine/device_profile.h"
#include "sim/engine/model_config.h"
#include "sim/engine/model_engine.h"
#include "sim/io/device_profile_yaml.h"
#include "sim/io/model_config_yaml.h"
#include "sim/io/scenario.h"

namespace feather {
namespace {

namespace fs = std::filesystem;

// One grid point: a synthetic step and whether the engine may use cascade attention.
struct GridPoint {
  hw::SyntheticBatchSpec spec;
  bool cascade = true;
  std::string label;
};

std::string Label(const char* kind, const hw::SyntheticBatchSpec& s, bool cascade) {
  std::ostringstream out;
  out << kind << " B=" << s.decode_requests << " G=" << s.groups << " P=" << s.shared_prefix_tokens
      << " S=" << s.suffix_tokens << " prefill=" << s.prefill_requests << "x"
      << s.prefill_chunk_tokens << "@" << s.prefill_context_tokens
      << (s.shuffle ? " shuffled" : "") << (cascade ? "" : " no-cascade");
  return out.str();
}

hw::SyntheticBatchSpec Decode(uint32_t requests, uint32_t groups, uint32_t prefix,
                              uint32_t suffix, bool shuffle, uint64_t seed) {
  hw::SyntheticBatchSpec spec;
  spec.decode_requests = requests;
  spec.groups = groups;
  spec.shared_prefix_tokens = groups > 0 ? prefix : 0;
  spec.suffix_tokens = suffix;
  spec.suffix_jitter_tokens = suffix / 4;
  spec.shuffle = shuffle;
  spec.seed = seed;
  return spec;
}

// The calibration grid. Quick mode keeps every kind of step but fewer sizes. The order
// interleaves kinds so that the held-out rows (every 5th) cover all of them.
std::vector<GridPoint> CalibrationGrid(bool quick) {
  std::vector<GridPoint> points;
  uint64_t seed = 1;
  auto add = [&](const char* kind, hw::SyntheticBatchSpec spec, bool cascade) {
    spec.seed = seed++;
    points.push_back({spec, cascade, Label(kind, spec, cascade)});
  };
  const std::vector<uint32_t> batch = quick ? std::vector<uint32_t>{1, 4, 16, 64, 128}
                                            : std::vector<uint32_t>{1, 2, 4, 8, 16, 32, 64, 96, 128};
  const std::vector<uint32_t> private_context =
      quick ? std::vector<uint32_t>{128, 1024} : std::vector<uint32_t>{64, 256, 1024, 2048};
  const std::vector<uint32_t> groups =
      quick ? std::vector<uint32_t>{1, 5, 20} : std::vector<uint32_t>{1, 2, 5, 10, 20};
  const std::vector<uint32_t> prefixes =
      quick ? std::vector<uint32_t>{1024} : std::vector<uint32_t>{256, 1024};
  const std::vector<uint32_t> suffixes =
      quick ? std::vector<uint32_t>{32} : std::vector<uint32_t>{32, 256};
  for (const uint32_t b : batch) {
    for (const uint32_t context : private_context) {
      add("decode", Decode(b, 0, 0, context, false, 0), true);
    }
    for (const uint32_t g : groups) {
      if (g > b) continue;
      for (const uint32_t prefix : prefixes) {
        for (const uint32_t suffix : suffixes) {
          add("decode", Decode(b, g, prefix, suffix, g > 1, 0), true);
          if (g == 1 && b >= 8) add("decode", Decode(b, g, prefix, suffix, false, 0), false);
        }
      }
    }
  }
  const std::vector<uint32_t> chunks =
      quick ? std::vector<uint32_t>{16, 256, 1024} : std::vector<uint32_t>{16, 64, 256, 512, 1024, 2048};
  const std::vector<uint32_t> contexts =
      quick ? std::vector<uint32_t>{0, 1024} : std::vector<uint32_t>{0, 512, 2048};
  const std::vector<uint32_t> prefill_requests =
      quick ? std::vector<uint32_t>{1, 2} : std::vector<uint32_t>{1, 2, 4};
  for (const uint32_t r : prefill_requests) {
    for (const uint32_t chunk : chunks) {
      if (chunk * r > 4096) continue;
      for (const uint32_t context : contexts) {
        hw::SyntheticBatchSpec spec;
        spec.prefill_requests = r;
        spec.prefill_chunk_tokens = chunk;
        spec.prefill_context_tokens = context;
        add("prefill", spec, true);
      }
    }
  }
  const std::vector<uint32_t> mixed_batch =
      quick ? std::vector<uint32_t>{32} : std::vector<uint32_t>{8, 32, 96};
  for (const uint32_t b : mixed_batch) {
    for (const uint32_t chunk : {32u, 512u}) {
      hw::SyntheticBatchSpec spec = Decode(b, 5, 1024, 32, true, 0);
      spec.prefill_requests = 1;
      spec.prefill_chunk_tokens = chunk;
      spec.prefill_context_tokens = 1024;
      spec.prefill_shares_prefix = true;
      add("mixed", spec, true);
    }
  }
  // Interleave kinds: a fixed stride permutation (coprime with the size) spreads neighbours.
  std::vector<GridPoint> mixed;
  mixed.reserve(points.size());
  const size_t n = points.size();
  size_t stride = 7;
  while (std::gcd(stride, n) != 1) ++stride;
  for (size_t i = 0; i < n; ++i) mixed.push_back(std::move(points[(i * stride) % n]));
  return mixed;
}

struct Probes {
  hw::BandwidthResult dram;
  hw::BandwidthResult llc;
  hw::GemmFlopsResult gemm_peak;
};

Probes RunProbes(bool quick, int threads, hw::GemmBackend backend, size_t llc_bytes) {
  Probes probes;
  hw::BandwidthOptions dram = quick ? hw::BandwidthOptions::Quick() : hw::BandwidthOptions{};
  dram.num_threads = threads;
  probes.dram = hw::MeasureReadBandwidth(dram);
  hw::BandwidthOptions llc = dram;
  llc.array_bytes = std::max<size_t>(llc_bytes / 4, size_t{1} << 20);
  llc.repetitions = std::max(llc.repetitions, 20);
  probes.llc = hw::MeasureReadBandwidth(llc);
  const hw::PeakGemmOptions gemm = quick ? hw::PeakGemmOptions::Quick() : hw::PeakGemmOptions{};
  probes.gemm_peak = hw::MeasurePeakGemmFlops(backend, threads, gemm);
  return probes;
}

// Measures every grid point `repetitions` times in interleaved passes (hw/interleaved_passes.h:
// this VM's speed drifts over minutes, and back-to-back repetitions would give every point its
// own drift state) and keeps each point's median repetition.
std::vector<MeasuredStep> MeasureGrid(std::vector<GridPoint>& grid, const ModelConfig& model,
                                      uint64_t pool_blocks, int threads,
                                      hw::GemmBackend backend, int repetitions,
                                      std::ostream& out) {
  std::unique_ptr<hw::CpuEngine> engines[2];  // [0] without cascade, [1] with
  for (const bool cascade : {false, true}) {
    const bool needed = std::any_of(grid.begin(), grid.end(),
                                    [&](const GridPoint& p) { return p.cascade == cascade; });
    if (!needed) continue;
    engines[cascade] = std::make_unique<hw::CpuEngine>(
        model, pool_blocks, 16,
        hw::CpuEngineOptions{.num_threads = threads, .cascade_attention = cascade,
                             .gemm_backend = backend});
  }
  std::vector<hw::SyntheticBatch> batches;
  batches.reserve(grid.size());
  for (GridPoint& point : grid) {
    point.spec.pool_blocks = pool_blocks;
    batches.push_back(hw::MakeSyntheticBatch(point.spec));
  }
  std::vector<MeasuredStep> rows(grid.size());
  const auto execute = [&](size_t i, int pass) {
    hw::CpuEngine& engine = *engines[grid[i].cascade];
    const StepTiming timing = engine.Execute(batches[i].plan);
    if (pass == 0) rows[i].shape = engine.last_shape();
    ThrowIfInterrupted();
    return timing;
  };
  const auto progress = [&](int pass) {
    out << "\r  measured pass " << pass << "/" << repetitions << " over " << grid.size()
        << " steps" << (pass == 0 ? " (warm-up)" : "") << std::flush;
  };
  const std::vector<std::vector<StepTiming>> timings =
      hw::RunInterleavedPasses(grid.size(), repetitions, execute, progress);
  for (size_t i = 0; i < grid.size(); ++i) rows[i].measured = hw::MedianByTotal(timings[i]);
  return rows;
}

DeviceProfile BaseProfile(const Probes& probes, const HostInfo& host, int threads) {
  DeviceProfile profile;
  profile.name = "cpu";
  profile.device = host.cpu_model + " (" + std::to_string(threads) + " threads)";
  profile.notes =
      "Calibrated by `feather calibrate --target cpu` on this machine: peaks from probes, the "
      "other parameters fitted to steps of the real CPU engine (hw/cpu_engine.h). memory_bytes "
      "is the RAM budget the CPU engine may use for weights and KV, not the machine's RAM.";
  auto set = [&profile](std::string_view name, double value, ParameterSource source,
                        std::string note) {
    const auto parameters = ProfileParameters();
    for (size_t i = 0; i < parameters.size(); ++i) {
      if (parameters[i].name != name) continue;
      profile.*(parameters[i].field) = value;
      profile.origins[i] = {source, std::move(note)};
      return;
    }
    throw std::logic_error("unknown profile parameter " + std::string(name));
  };
  const double budget = std::min(4.0 * (1ull << 30), static_cast<double>(host.memory_bytes) / 4);
  set("memory_bytes", budget, ParameterSource::kAssumed,
      "RAM budget for the CPU engine's weights and KV: min(4 GiB, a quarter of RAM)");
  set("activation_reserve_bytes", 256.0 * (1 << 20), ParameterSource::kAssumed,
      "activations and scratch of the CPU engine at the largest step; a typical figure");
  set("dram_bw_bytes_per_s", probes.dram.bytes_per_s, ParameterSource::kMeasured,
      "read bandwidth of " + std::to_string(probes.dram.array_bytes >> 20) + " MiB with " +
          std::to_string(probes.dram.num_threads) + " threads, best of " +
          std::to_string(probes.dram.repetitions) + " (hw/probes.h MeasureReadBandwidth)");
  set("dense_flops_per_s", probes.gemm_peak.flops_per_s, ParameterSource::kMeasured,
      "peak fp32 GEMM FLOP/s, " + std::string(hw::GemmBackendName(probes.gemm_peak.backend)) +
          " " + std::to_string(probes.gemm_peak.m) + "^3, " +
          std::to_string(probes.gemm_peak.num_threads) + " threads (hw/probes.h)");
  set("sm_count", threads, ParameterSource::kMeasured,
      "threads of the CPU engine: the parallel units of vLLM's cascade rule");
  set("gemm_bw_efficiency", 0.8, ParameterSource::kAssumed, "starting value");
  set("gemm_flops_efficiency", 0.7, ParameterSource::kAssumed, "starting value");
  set("gemm_batched_fixed_ns", 0, ParameterSource::kAssumed, "starting value");
  set("attn_bw_efficiency", 0.8, ParameterSource::kAssumed, "starting value");
  set("attn_flops_efficiency", 0.3, ParameterSource::kAssumed, "starting value");
  set("l2_bw_bytes_per_s", probes.llc.bytes_per_s, ParameterSource::kMeasured,
      "read bandwidth of an LLC-resident array (" + std::to_string(probes.llc.array_bytes >> 10) +
          " KiB), the starting value for KV reads served by the LLC");
  set("reuse_hit_max", 0.5, ParameterSource::kAssumed, "starting value");
  set("reuse_window_ctas", 8, ParameterSource::kAssumed, "starting value");
  set("cascade_layer_ns", 10000, ParameterSource::kAssumed, "starting value");
  set("cascade_merge_ns_per_request_layer", 500, ParameterSource::kAssumed, "starting value");
  set("step_fixed_ns", 100000, ParameterSource::kAssumed, "starting value");
  set("layer_fixed_ns", 0, ParameterSource::kAssumed, "starting value");
  set("per_request_ns", 1000, ParameterSource::kAssumed, "starting value");
  return profile;
}

// PROFILE-rows.csv beside PROFILE.yaml.
fs::path RowsPathOf(const fs::path& profile_path) {
  return profile_path.parent_path() / (profile_path.stem().string() + "-rows.csv");
}

// Writes the fitted profile and its rows (atomically) and prints the fit report.
void WriteFitOutputs(const calib::CalibrationFit& fit, const ModelConfig& model,
                     const std::vector<std::string>& labels, const std::vector<MeasuredStep>& rows,
                     const calib::FitOptions& fit_options, const fs::path& profile_path,
                     std::chrono::steady_clock::time_point started, std::ostream& out) {
  const fs::path rows_path = RowsPathOf(profile_path);
  if (profile_path.has_parent_path()) fs::create_directories(profile_path.parent_path());
  WriteFileAtomically(rows_path, calib::RowsToCsv(labels, rows, StepPricer(fit.profile, model),
                                                  fit_options.holdout_every));
  WriteFileAtomically(profile_path, DeviceProfileToYaml(fit.profile));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  out << calib::FormatFitReport(fit);
  out << std::fixed << std::setprecision(4) << "step time MAPE: fit " << fit.fit_mape
      << ", holdout " << fit.holdout_mape.value_or(0) << " (" << fit.holdout_rows
      << " held-out rows)\n"
      << "wrote " << profile_path.string() << " and " << rows_path.string() << " in "
      << std::setprecision(2) << seconds << " s\n";
}

std::string IsaName() {
  return hw::attention_internal::ActiveAttentionIsa() == hw::attention_internal::AttentionIsa::kAvx2 ? "avx2+fma" : "scalar";
}

int CalibrateCpu(const CalibrateCommandOptions& options, std::ostream& out) {
  const auto started = std::chrono::steady_clock::now();
  const ResolvedText model_text = ReadNamedFile(options.model, "scenarios/models", "model");
  const ModelConfig model = ParseModelConfig(model_text.text, model_text.display_name);
  const int threads = options.threads > 0 ? options.threads : hw::UsableThreads();
  const hw::GemmBackend backend = hw::DefaultGemmBackend();
  const HostInfo host = ReadHostInfo();
  const std::string out_path = options.out_path.empty()
                                   ? std::string("out/calibrate/cpu") +
                                         (options.quick ? "-quick" : "") + ".yaml"
                                   : options.out_path;

  out << "probing bandwidth and GEMM peak (" << threads << " threads)...\n" << std::flush;
  const Probes probes = RunProbes(options.quick, threads, backend, host.caches.l3_bytes);
  ThrowIfInterrupted();
  out << "  DRAM read " << probes.dram.bytes_per_s / 1e9 << " GB/s, LLC read "
      << probes.llc.bytes_per_s / 1e9 << " GB/s, GEMM peak " << probes.gemm_peak.flops_per_s / 1e9
      << " GFLOP/s\n";

  std::vector<GridPoint> grid = CalibrationGrid(options.quick);
  // Build every step first: the pool must hold the largest one, and ids scatter over it.
  uint64_t pool_blocks = 0;
  for (GridPoint& point : grid) {
    pool_blocks = std::max(pool_blocks, hw::MakeSyntheticBatch(point.spec).pool_blocks);
  }
  pool_blocks += pool_blocks / 8;
  const int repetitions = options.quick ? 3 : 5;
  const std::vector<MeasuredStep> rows =
      MeasureGrid(grid, model, pool_blocks, threads, backend, repetitions, out);
  out << '\n';

  DeviceProfile base = BaseProfile(probes, host, threads);
  ProfileMeasuredOn measured_on;
  measured_on.host = host.hostname;
  measured_on.cpu_model = host.cpu_model;
  measured_on.date_utc = host.date_utc;
  measured_on.build = {host.compiler, host.build_type, host.git_rev};
  measured_on.kernel_variant = IsaName() + ", openmp " + std::to_string(threads) +
                               " threads, gemm=" + std::string(hw::GemmBackendName(backend)) +
                               ", model " + model.name + (options.quick ? ", quick grid" : "");
  measured_on.threads = static_cast<uint32_t>(threads);
  measured_on.usable_cpus = host.usable_cpus;
  measured_on.l3_cache_bytes = host.caches.l3_bytes;
  measured_on.read_bw_bytes_per_s = probes.dram.bytes_per_s;
  base.measured_on = measured_on;
  calib::FitOptions fit_options;
  fit_options.rows_label = fs::path(out_path).stem().string() + "-rows.csv";
  const calib::CalibrationFit fit = FitProfile(base, model, rows, fit_options);

  std::vector<std::string> labels;
  for (const GridPoint& point : grid) labels.push_back(point.label);
  WriteFitOutputs(fit, model, labels, rows, fit_options, out_path, started, out);
  return 0;
}

// `--refit ROWS...`: the fit of a live calibration on stored rows (calib/rows_csv.h), with the
// peaks, capacity and provenance of a base profile (the one written beside the first rows file
// unless --base names another).
int Refit(const CalibrateCommandOptions& options, std::ostream& out) {
  const auto started = std::chrono::steady_clock::now();
  if (options.out_path.empty()) {
    throw std::invalid_argument("--refit needs --out PROFILE.yaml (the refitted profile)");
  }
  std::string base_path = options.base_profile;
  if (base_path.empty()) {
    const fs::path first(options.refit_rows.front());
    std::string stem = first.stem().string();
    const std::string suffix = "-rows";
    if (stem.size() > suffix.size() && stem.ends_with(suffix)) {
      stem.resize(stem.size() - suffix.size());
      base_path = (first.parent_path() / (stem + ".yaml")).string();
    }
    if (base_path.empty() || !fs::exists(base_path)) {
      throw std::invalid_argument(
          "--refit: no profile beside " + first.string() + " (expected " +
          (base_path.empty() ? std::string("<name>.yaml for <name>-rows.csv") : base_path) +
          "); name the profile whose peaks to keep with --base PROFILE.yaml");
    }
  }
  const ResolvedText base_text = ReadNamedFile(base_path, "results/profiles", "--base");
  const DeviceProfile base = ParseDeviceProfile(base_text.text, base_text.display_name);
  const ResolvedText model_text = ReadNamedFile(options.model, "scenarios/models", "model");
  const ModelConfig model = ParseModelConfig(model_text.text, model_text.display_name);

  std::vector<std::string> labels;
  std::vector<MeasuredStep> rows;
  std::string rows_label;
  for (const std::string& path : options.refit_rows) {
    for (calib::LabeledRow& row : calib::LoadRowsCsv(path)) {
      labels.push_back(std::move(row.label));
      rows.push_back(row.step);
    }
    rows_label += (rows_label.empty() ? "" : " + ") + fs::path(path).filename().string();
  }
  calib::FitOptions fit_options;
  fit_options.rows_label = rows_label + " (refit, base " + base_text.display_name + ")";
  const calib::CalibrationFit fit = FitProfile(base, model, rows, fit_options);

  for (const std::string& input : options.refit_rows) {
    std::error_code error;
    if (fs::equivalent(input, RowsPathOf(options.out_path), error) ||
        fs::equivalent(input, options.out_path, error)) {
      throw std::invalid_argument("--out " + options.out_path + " would overwrite the rows " +
                                  input + " it reads; choose another --out");
    }
  }
  out << "refitting " << rows.size() << " rows\n";
  WriteFitOutputs(fit, model, labels, rows, fit_options, options.out_path, started, out);
  return 0;
}

}  // namespace

int CalibrateCommand(const CalibrateCommandOptions& options, std::ostream& out) {
  if (!options.refit_rows.empty()) return Refit(options, out);
  if (options.target == "cuda") {
    throw std::invalid_argument(
        "--target cuda: the CUDA engine and its calibration are not built yet (issue 7)");
  }
  if (options.target != "cpu") {
    throw std::invalid_argument("--target must be cpu or cuda, got '" + options.target + "'");
  }
  const InterruptScope scope;
  try {
    return CalibrateCpu(options, out);
  } catch (const Interrupted& interrupted) {
    RemoveRegisteredTempPaths();
    std::fflush(stdout);
    std::fprintf(stderr, "feather: calibrate %s; no profile written\n", interrupted.what());
    return interrupted.exit_code();
  }
}

}  // namespace feather
