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

#include "calib/cpu_calibration.h"
#include "calib/fit.h"
#include "calib/rows_csv.h"
#include "cli/atomic_file.h"
#include "cli/interrupt.h"
#include "hw/gemm.h"
#include "hw/host_info.h"
#include "sim/engine/device_profile.h"
#include "sim/engine/model_config.h"
#include "sim/engine/model_engine.h"
#include "sim/io/device_profile_yaml.h"
#include "sim/io/model_config_yaml.h"
#include "sim/io/scenario.h"

namespace feather {
namespace {

namespace fs = std::filesystem;

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
  const calib::Probes probes =
      calib::RunProbes(options.quick, threads, backend, host.caches.l3_bytes);
  ThrowIfInterrupted();
  out << "  DRAM read " << probes.dram.bytes_per_s / 1e9 << " GB/s, LLC read "
      << probes.llc.bytes_per_s / 1e9 << " GB/s, GEMM peak " << probes.gemm_peak.flops_per_s / 1e9
      << " GFLOP/s\n";

  std::vector<calib::GridPoint> grid = calib::CalibrationGrid(options.quick);
  // Build every step first: the pool must hold the largest one, and ids scatter over it.
  uint64_t pool_blocks = 0;
  for (calib::GridPoint& point : grid) {
    pool_blocks = std::max(pool_blocks, hw::MakeSyntheticBatch(point.spec).pool_blocks);
  }
  pool_blocks += pool_blocks / 8;
  const int repetitions = options.quick ? 3 : 5;
  const auto progress = [&](int pass) {
    out << "\r  measured pass " << pass << "/" << repetitions << " over " << grid.size()
        << " steps" << (pass == 0 ? " (warm-up)" : "") << std::flush;
  };
  const std::vector<MeasuredStep> rows = calib::MeasureCpuGrid(
      grid, model, pool_blocks, threads, backend, repetitions, [] { ThrowIfInterrupted(); },
      progress);
  out << '\n';

  DeviceProfile base = calib::CpuBaseProfile(probes, host, threads);
  ProfileMeasuredOn measured_on;
  measured_on.host = host.hostname;
  measured_on.cpu_model = host.cpu_model;
  measured_on.date_utc = host.date_utc;
  measured_on.build = {host.compiler, host.build_type, host.git_rev};
  measured_on.kernel_variant = calib::AttentionIsaName() + ", openmp " + std::to_string(threads) +
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
  for (const calib::GridPoint& point : grid) labels.push_back(point.label);
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
