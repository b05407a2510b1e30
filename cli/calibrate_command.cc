// calibrate_command.cc: `feather calibrate --target cpu` (see calibrate_command.h).
#include "cli/calibrate_command.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <ostream>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/input_text.h"
#include "calib/cpu_calibration.h"
#include "calib/cuda_calibration.h"
#include "calib/fit.h"
#include "calib/harness.h"
#include "calib/published_rows.h"
#include "calib/ratio_fit.h"
#include "calib/rows_csv.h"
#include "cli/atomic_file.h"
#include "cli/interrupt.h"
#include "cli/selfcheck_command.h"
#include "hw/cuda/cuda_variables.h"
#include "hw/cuda/device.h"
#include "hw/decode_prefetch_tuning.h"
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

// PROFILE<suffix> beside PROFILE.yaml ("-rows.csv", "-passes.csv").
fs::path BesideProfile(const fs::path& profile_path, const char* suffix) {
  return profile_path.parent_path() / (profile_path.stem().string() + suffix);
}
fs::path RowsPathOf(const fs::path& profile_path) {
  return BesideProfile(profile_path, "-rows.csv");
}
// The inverse: X.yaml for X-rows.csv (nullopt for a name without the suffix).
std::optional<fs::path> ProfileOfRows(const fs::path& rows_path) {
  std::string stem = rows_path.stem().string();
  const std::string suffix = "-rows";
  if (stem.size() <= suffix.size() || !stem.ends_with(suffix)) return std::nullopt;
  stem.resize(stem.size() - suffix.size());
  return rows_path.parent_path() / (stem + ".yaml");
}

// PROFILE-passes.csv beside PROFILE.yaml: every timed repetition of a live calibration's rows.
fs::path WritePasses(const std::vector<std::string>& labels,
                     std::span<const std::vector<StepTiming>> repetitions,
                     const fs::path& profile_path) {
  if (profile_path.has_parent_path()) fs::create_directories(profile_path.parent_path());
  const fs::path path = BesideProfile(profile_path, "-passes.csv");
  WriteFileAtomically(path, calib::PassesToCsv(labels, repetitions));
  return path;
}

// With primed rows: PROFILE-unprimed-rows.csv beside PROFILE.yaml (the same grid timed after the
// previous grid point in the same passes, priced by the fitted profile; `calibrate --refit` reads
// it), and one line of what the order changed: per class of new tokens, the median over its rows
// of primed / unprimed step time.
void WriteUnprimedRows(const std::vector<std::string>& labels,
                       std::span<const calib::StepMeasurement> measurements,
                       const DeviceProfile& profile, const ModelConfig& model,
                       const calib::FitOptions& fit_options, const fs::path& profile_path,
                       std::ostream& out) {
  const std::vector<MeasuredStep> unprimed = calib::UnprimedRowsOf(measurements);
  if (unprimed.empty()) return;
  const fs::path path = BesideProfile(profile_path, "-unprimed-rows.csv");
  WriteFileAtomically(path, calib::RowsToCsv(labels, unprimed, StepPricer(profile, model),
                                             fit_options.holdout_every));
  struct Class {
    const char* name;
    double max_tokens;
    std::vector<double> ratios;
  };
  std::vector<Class> classes = {{"1 token", 1, {}},
                                {"2-8", 8, {}},
                                {"9-128", 128, {}},
                                {"over 128", std::numeric_limits<double>::infinity(), {}}};
  for (size_t i = 0; i < measurements.size(); ++i) {
    const double after_itself = static_cast<double>(measurements[i].row.measured.total_ns);
    const double after_other = static_cast<double>(unprimed[i].measured.total_ns);
    if (after_other <= 0) continue;
    for (Class& c : classes) {
      if (measurements[i].row.shape.new_tokens <= c.max_tokens) {
        c.ratios.push_back(after_itself / after_other);
        break;
      }
    }
  }
  out << "step order (median of each row's time right after itself / after the previous grid "
         "point, by new tokens):";
  for (Class& c : classes) {
    if (c.ratios.empty()) continue;
    const auto middle = c.ratios.begin() + static_cast<std::ptrdiff_t>(c.ratios.size() / 2);
    std::nth_element(c.ratios.begin(), middle, c.ratios.end());
    out << ' ' << c.name << ' ' << std::fixed << std::setprecision(3) << *middle << " ("
        << c.ratios.size() << " rows);";
  }
  out << "\nunprimed rows: " << path.string() << "\n";
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
  calib::Probes probes =
      calib::RunProbes(threads, backend, host.caches.l3_bytes, model.StepWeightBytes());
  const double dram_first = probes.dram.bytes_per_s;  // the slowest read is kept too
  ThrowIfInterrupted();
  out << "  DRAM read " << probes.dram.bytes_per_s / 1e9 << " GB/s, LLC read "
      << probes.llc.bytes_per_s / 1e9 << " GB/s, weights (" << (probes.weights.array_bytes >> 20)
      << " MiB) read " << probes.weights.bytes_per_s / 1e9 << " GB/s, GEMM peak "
      << probes.gemm_peak.flops_per_s / 1e9 << " GFLOP/s\n";

  // The kernels' prefetch lookahead that reads this model's KV fastest here, measured before
  // anything else is timed so that every row, and the engine runs the profile prices, use it.
  hw::DecodePrefetchTuneOptions tune_options;
  tune_options.kv_heads = model.kv_heads;
  tune_options.heads = model.heads;
  tune_options.head_dim = model.head_dim;
  tune_options.dtype = model.dtype_bytes == 2 ? hw::KvDtype::kBf16 : hw::KvDtype::kFp32;
  tune_options.num_threads = threads;
  tune_options.block_tokens = options.block_tokens;
  if (options.quick) {
    tune_options.pool_bytes = size_t{128} << 20;
    tune_options.rounds = 3;
  }
  const hw::DecodePrefetchTuning tuning = hw::TuneDecodePrefetch(tune_options);
  ThrowIfInterrupted();
  hw::SetDecodePrefetchBytes(tuning.best_bytes);
  out << "decode prefetch lookahead (" << tuning.rounds << " rounds, "
      << tuning.kv_bytes / (size_t{1} << 20) << " MiB of KV per pass):";
  for (const hw::DecodePrefetchCandidate& c : tuning.candidates) {
    out << ' ' << c.bytes / 1024 << " KiB " << c.bytes_per_s.median / 1e9 << " GB/s;";
  }
  out << " using " << tuning.best_bytes / 1024 << " KiB"
      << (tuning.verification == hw::Verification::kOk ? "" : " (the default: outputs differed)")
      << "\n";

  std::vector<calib::GridPoint> grid = calib::CalibrationGrid(options.quick);
  calib::SetGridBlockTokens(grid, options.block_tokens);
  // Build every step first: the pool must hold the largest one, and ids scatter over it.
  uint64_t pool_blocks = calib::LargestStepBlocks(grid);
  pool_blocks += pool_blocks / 8;
  const int repetitions = options.quick ? 3 : 5;
  const auto progress = [&](int pass) {
    out << "\r  measured pass " << pass << "/" << repetitions << " over " << grid.size()
        << " steps" << (pass == 0 ? " (warm-up)" : "") << std::flush;
    if (pass > 0) calib::ProbeBandwidthBetweenPasses(probes, threads, host.caches.l3_bytes);
  };
  const bool primed = options.primed;
  const std::vector<calib::StepMeasurement> measurements = calib::MeasureCpuGrid(
      grid, model, pool_blocks, threads, backend, repetitions, [] { ThrowIfInterrupted(); },
      progress, {}, primed);
  out << '\n';
  const auto [dram_low, dram_high] =
      std::minmax_element(probes.dram_between_passes.begin(), probes.dram_between_passes.end());
  out << "  DRAM read between passes " << *dram_low / 1e9 << "-" << *dram_high / 1e9
      << " GB/s; the profile takes the fastest read, " << probes.dram.bytes_per_s / 1e9
      << " GB/s\n";
  if (!probes.weights_between_passes.empty()) {
    const auto [low, high] = std::minmax_element(probes.weights_between_passes.begin(),
                                                 probes.weights_between_passes.end());
    out << "  weights read between passes " << *low / 1e9 << "-" << *high / 1e9
        << " GB/s; the profile takes the fastest read, " << probes.weights.bytes_per_s / 1e9
        << " GB/s\n";
  }
  const std::vector<MeasuredStep> rows = calib::RowsOf(measurements);

  const bool packed = hw::DefaultPackedWeights(backend);  // as MeasureCpuGrid's engines hold them
  DeviceProfile base = calib::CpuBaseProfile(probes, host, threads, packed);
  ProfileMeasuredOn measured_on;
  measured_on.host = host.hostname;
  measured_on.cpu_model = host.cpu_model;
  measured_on.cpu_signature = host.cpu_signature;
  measured_on.date_utc = host.date_utc;
  measured_on.build = {host.compiler, host.build_type, host.git_rev};
  measured_on.kernel_variant =
      calib::AttentionIsaName() + ", openmp " + std::to_string(threads) + " threads, gemm=" +
      (packed ? "eigen/" + std::string(hw::GemmIsaName(hw::ActiveGemmIsa())) + " packed"
              : hw::GemmKernelName(backend)) +
      ", model " + model.name + (options.quick ? ", quick grid" : "");
  measured_on.threads = static_cast<uint32_t>(threads);
  measured_on.usable_cpus = host.usable_cpus;
  measured_on.l3_cache_bytes = host.caches.l3_bytes;
  measured_on.read_bw_bytes_per_s = probes.dram.bytes_per_s;
  measured_on.read_bw_low_bytes_per_s = dram_first;
  for (const double read : probes.dram_between_passes) {
    measured_on.read_bw_low_bytes_per_s = std::min(measured_on.read_bw_low_bytes_per_s, read);
  }
  measured_on.probes = "full";  // also with --quick (calib::RunProbes says why)
  measured_on.decode_prefetch_bytes = tuning.best_bytes;
  measured_on.gemm_weights = packed ? "packed" : "row-major";
  measured_on.row_order = primed ? "primed" : "interleaved";
  measured_on.block_tokens = options.block_tokens;
  base.measured_on = measured_on;
  calib::FitOptions fit_options;
  fit_options.hold = options.hold;
  fit_options.rows_label = RowsPathOf(out_path).filename().string();
  // Every repetition: the hold-out noise floor, and PROFILE-passes.csv.
  std::vector<std::vector<StepTiming>> timings;
  timings.reserve(measurements.size());
  for (const calib::StepMeasurement& m : measurements) timings.push_back(m.repetitions);
  fit_options.repetitions = timings;
  calib::CalibrationFit fit = FitProfile(base, model, rows, fit_options);
  fit.profile.step_noise = calib::StepNoiseOf(
      measurements, "repetitions of the " + std::to_string(rows.size()) +
                        " calibration steps in interleaved passes (calib/harness.h" +
                        (primed ? ", each right after an untimed run of itself" : "") +
                        "): per term, repetition / median repetition - 1, pooled over the steps");

  std::vector<std::string> labels;
  for (const calib::GridPoint& point : grid) labels.push_back(point.label);
  const fs::path passes_path = WritePasses(labels, timings, out_path);
  WriteFitOutputs(fit, model, labels, rows, fit_options, out_path, started, out);
  out << "every timed repetition: " << passes_path.string() << "\n";
  WriteUnprimedRows(labels, measurements, fit.profile, model, fit_options, out_path, out);
  return 0;
}

// Prints each ratio row's measured and predicted value under `profile` (rows of its device only).
void CheckRatios(const std::vector<calib::RatioRow>& ratios, const DeviceProfile& profile,
                 std::ostream& out) {
  size_t checked = 0, consistent = 0;
  double abs_error = 0;
  out << "ratio rows under profile " << profile.name << ":\n";
  for (const calib::RatioRow& row : ratios) {
    if (row.device != profile.name) {
      out << "  " << row.id << ": not checked (device " << row.device << ", profile "
          << profile.name << ")\n";
      continue;
    }
    const ResolvedText model_text = ReadNamedFile(row.model, "scenarios/models", "model");
    const ModelConfig model = ParseModelConfig(model_text.text, model_text.display_name);
    const calib::RatioCheck check = calib::CheckRatio(row, StepPricer(profile, model));
    char line[256];
    std::snprintf(line, sizeof line, "  %-28s measured %-8s %7.3f  predicted %7.3f  (%+6.1f%%)%s\n",
                  row.id.c_str(), std::string(calib::RatioRelationName(row.relation)).c_str(),
                  row.measured, check.predicted, 100 * check.rel_error,
                  check.consistent ? "" : "  INCONSISTENT");
    out << line;
    ++checked;
    consistent += check.consistent ? 1 : 0;
    abs_error += std::abs(check.rel_error);
  }
  if (checked > 0) {
    out << "  " << consistent << " of " << checked << " consistent; mean |error| "
        << std::setprecision(3) << 100 * abs_error / static_cast<double>(checked) << "%\n";
  }
}

// The joint fit of `free` to the ratio rows of `base`'s device (calib/ratio_fit.h); prints a
// line per parameter.
DeviceProfile FitRatios(const DeviceProfile& base, const std::vector<calib::RatioRow>& ratios,
                        const std::vector<std::string>& free, const std::vector<std::string>& ids,
                        const std::string& rows_label, std::ostream& out) {
  for (const std::string& id : ids) {
    if (std::none_of(ratios.begin(), ratios.end(),
                     [&](const calib::RatioRow& row) { return row.id == id; })) {
      throw std::invalid_argument("--ratio-rows: no ratio row has the id '" + id + "'");
    }
  }
  std::vector<calib::RatioRow> mine;
  std::vector<ModelConfig> models;
  for (const calib::RatioRow& row : ratios) {
    if (row.device != base.name) continue;
    if (!ids.empty() && std::find(ids.begin(), ids.end(), row.id) == ids.end()) continue;
    const ResolvedText model_text = ReadNamedFile(row.model, "scenarios/models", "model");
    models.push_back(ParseModelConfig(model_text.text, model_text.display_name));
    mine.push_back(row);
  }
  if (mine.empty()) {
    throw std::invalid_argument("--fit-ratios: no ratio row is of device " + base.name);
  }
  const calib::RatioFit fit = calib::FitRatioRows(base, mine, models, free, rows_label);
  out << "joint ratio fit on " << mine.size() << " rows of " << base.name << ":\n";
  for (const calib::ParameterFit& p : fit.parameters) {
    char line[512];
    std::snprintf(line, sizeof line, "  %-36s %-6s %14.6g (base %.6g)%s%s\n",
                  std::string(p.name).c_str(), p.fitted ? (p.lower_bound ? "bound" : "fitted") : "kept", p.value,
                  p.base_value, p.why.empty() ? "" : ": ", p.why.c_str());
    out << line;
  }
  return fit.profile;
}

// Appends to the notes of a profile fitted to published rows the parameters still `assumed`
// (nothing published informs them), so a reader sees them without reading every note.
void ListAssumed(DeviceProfile& profile) {
  std::string list;
  const auto params = ProfileParameters();
  for (size_t i = 0; i < params.size(); ++i) {
    if (profile.origins[i].source != ParameterSource::kAssumed) continue;
    list += (list.empty() ? "" : ", ") + std::string(params[i].name);
  }
  const std::string marker = " Assumed (nothing published informs them): ";
  if (const size_t at = profile.notes.find(marker); at != std::string::npos) {
    profile.notes.resize(at);
  }
  profile.notes += marker + (list.empty() ? std::string("none") : list) + ".";
}

// `--refit ROWS...`: the fit of a live calibration on stored rows (calib/rows_csv.h), with the
// peaks, capacity and provenance of a base profile (the one written beside the first rows file
// unless --base names another).
int Refit(const CalibrateCommandOptions& options, std::ostream& out) {
  const auto started = std::chrono::steady_clock::now();
  std::string base_path = options.base_profile;
  if (base_path.empty()) {
    const fs::path first(options.refit_rows.front());
    if (const std::optional<fs::path> profile = ProfileOfRows(first)) base_path = profile->string();
    if (base_path.empty() || !fs::exists(base_path)) {
      throw std::invalid_argument(
          "--refit: no profile beside " + first.string() + " (expected " +
          (base_path.empty() ? std::string("<name>.yaml for <name>-rows.csv") : base_path) +
          "); name the profile whose peaks to keep with --base PROFILE.yaml");
    }
  }
  const ResolvedText base_text = ReadNamedFile(base_path, "results/profiles", "--base");
  const DeviceProfile base = ParseDeviceProfile(base_text.text, base_text.display_name);

  // Each file by its first line (calib/published_rows.h): calibration rows, Vidur tables,
  // decode-attention points, ratio rows.
  std::vector<std::string> labels;
  std::vector<MeasuredStep> rows;
  std::vector<calib::PublishedTermRow> vidur, decode;
  std::vector<calib::RatioRow> ratios;
  std::vector<std::vector<StepTiming>> repetitions;     // of the calibration rows, in order
  std::vector<std::string> passes_used, passes_missing;  // their passes files
  std::string rows_label;
  for (const std::string& path : options.refit_rows) {
    const std::string text = ReadTextFile(path, "rows file");
    switch (calib::DetectRowsFileKind(text, path)) {
      case calib::RowsFileKind::kCalibrationRows: {
        std::vector<calib::LabeledRow> parsed = calib::ParseRowsCsv(text, path);
        // X-passes.csv beside X-rows.csv: every repetition, for the hold-out noise floor.
        const std::optional<fs::path> profile = ProfileOfRows(path);
        const fs::path passes = profile ? BesideProfile(*profile, "-passes.csv") : fs::path();
        if (!passes.empty() && fs::is_regular_file(passes)) {
          for (std::vector<StepTiming>& reps : calib::LoadPassesCsv(passes.string(), parsed)) {
            repetitions.push_back(std::move(reps));
          }
          passes_used.push_back(passes.string());
        } else {
          passes_missing.push_back(passes.empty() ? path : passes.string());
        }
        for (calib::LabeledRow& row : parsed) {
          labels.push_back(std::move(row.label));
          rows.push_back(row.step);
        }
        break;
      }
      case calib::RowsFileKind::kVidurMlp: {
        std::string device = "unknown";
        for (const fs::path& part : fs::path(path)) {
          if (part == "h100" || part == "a100") device = part.string();
        }
        for (calib::PublishedTermRow& row : calib::ParseVidurMlpCsv(text, path, device)) {
          if (options.tensor_parallel == 0 || row.tensor_parallel == options.tensor_parallel) {
            vidur.push_back(std::move(row));
          }
        }
        break;
      }
      case calib::RowsFileKind::kDecodePoints:
        for (calib::PublishedTermRow& row : calib::ParseDecodePointsCsv(text, path)) {
          decode.push_back(std::move(row));
        }
        break;
      case calib::RowsFileKind::kRatios:
        for (calib::RatioRow& row : calib::ParseRatioRowsCsv(text, path)) {
          ratios.push_back(std::move(row));
        }
        break;
    }
    rows_label += (rows_label.empty() ? "" : " + ") + fs::path(path).filename().string();
  }
  const bool published = !vidur.empty() || !decode.empty() || !ratios.empty();
  if (published && !rows.empty()) {
    throw std::invalid_argument(
        "--refit: calibration rows and published rows in one fit: they come from different "
        "devices and models; refit them separately");
  }
  // One fit is one model: the Vidur rows' per-GPU shard (one TP degree), else --model.
  ModelConfig model;
  if (!vidur.empty()) {
    std::vector<uint32_t> degrees;
    for (const calib::PublishedTermRow& row : vidur) {
      if (std::find(degrees.begin(), degrees.end(), row.tensor_parallel) == degrees.end()) {
        degrees.push_back(row.tensor_parallel);
      }
      if (row.model.name != vidur.front().model.name || row.device != vidur.front().device) {
        throw std::invalid_argument("--refit: Vidur rows of two models or devices (" +
                                    vidur.front().citation + ": " + vidur.front().model.name +
                                    " on " + vidur.front().device + ", " + row.citation + ": " +
                                    row.model.name + " on " + row.device +
                                    "): one fit is one model on one device");
      }
    }
    if (degrees.size() > 1) {
      std::string list;
      for (const uint32_t d : degrees) list += (list.empty() ? "" : ", ") + std::to_string(d);
      throw std::invalid_argument("--refit: the Vidur rows hold tensor-parallel degrees " + list +
                                  "; choose one with --tp N (one fit is one per-GPU model)");
    }
    model = vidur.front().model;
    rows_label += " (tp " + std::to_string(degrees.front()) + ")";
    for (const calib::PublishedTermRow& row : vidur) {
      labels.push_back(row.label + " [" + row.citation + "]");
      rows.push_back(row.step);
    }
  } else if (published && options.tensor_parallel != 0) {
    throw std::invalid_argument("--tp selects Vidur rows, and no --refit file is a Vidur table");
  } else {
    const ResolvedText model_text = ReadNamedFile(options.model, "scenarios/models", "model");
    model = ParseModelConfig(model_text.text, model_text.display_name);
  }
  for (const calib::PublishedTermRow& row : decode) {
    labels.push_back(row.label + " [" + row.citation + "]");
    rows.push_back(calib::RestateDecodeRow(row, model));
  }
  calib::FitOptions fit_options;
  fit_options.hold = options.hold;
  fit_options.rows_label = rows_label + " (refit, base " + base_text.display_name + ")";
  if (!passes_used.empty() && passes_missing.empty()) {
    fit_options.repetitions = repetitions;
    for (const std::string& p : passes_used) out << "repetitions for the noise floor: " << p << '\n';
  } else if (!passes_missing.empty() && vidur.empty() && decode.empty()) {
    out << "no hold-out noise floor: no " << passes_missing.front()
        << " (the repetitions a live calibration writes beside its rows)\n";
  }
  if (published) fit_options.fitted_source = ParameterSource::kPublished;
  if (!options.fit_ratios.empty() && ratios.empty()) {
    throw std::invalid_argument("--fit-ratios needs ratio rows among the --refit files");
  }
  if (rows.empty() && !options.fit_ratios.empty()) {  // ratio rows only: a joint ratio fit
    if (options.out_path.empty()) {
      throw std::invalid_argument("--refit needs --out PROFILE.yaml (the refitted profile)");
    }
    DeviceProfile profile = FitRatios(base, ratios, options.fit_ratios, options.ratio_rows, rows_label, out);
    profile.provenance.push_back("joint ratio fit (calib/ratio_fit.h) on " + rows_label +
                                 " (refit, base " + base_text.display_name + ")");
    ListAssumed(profile);
    const fs::path profile_path(options.out_path);
    if (profile_path.has_parent_path()) fs::create_directories(profile_path.parent_path());
    WriteFileAtomically(profile_path, DeviceProfileToYaml(profile));
    CheckRatios(ratios, profile, out);
    out << "wrote " << profile_path.string() << " in " << std::fixed << std::setprecision(2)
        << std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()
        << " s\n";
    return 0;
  }
  if (rows.empty()) {  // ratio rows only: checked against the base, nothing fitted
    CheckRatios(ratios, base, out);
    out << "nothing to fit: " << ratios.size()
        << " ratio rows are checked, not fitted (calib/published_rows.h); no profile written\n";
    return 0;
  }
  if (options.out_path.empty()) {
    throw std::invalid_argument("--refit needs --out PROFILE.yaml (the refitted profile)");
  }
  calib::CalibrationFit fit = FitProfile(base, model, rows, fit_options);
  if (!options.fit_ratios.empty()) {
    fit.profile = FitRatios(fit.profile, ratios, options.fit_ratios, options.ratio_rows, rows_label, out);
  }
  if (published) ListAssumed(fit.profile);

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
  if (!ratios.empty()) CheckRatios(ratios, fit.profile, out);
  return 0;
}

#if FEATHER_HAVE_CUDA
// `--target cuda` after its gates: GPU probes, the grid on CUDA engines, the same fit.
int CalibrateCuda(const CalibrateCommandOptions& options, std::ostream& out) {
  const auto started = std::chrono::steady_clock::now();
  const ResolvedText model_text = ReadNamedFile(options.model, "scenarios/models", "model");
  const ModelConfig model = ParseModelConfig(model_text.text, model_text.display_name);
  const hw::cuda::CudaDeviceInfo device = hw::cuda::QueryCudaDevice();
  const HostInfo host = ReadHostInfo();
  const std::string out_path = options.out_path.empty()
                                   ? std::string("out/calibrate/cuda") +
                                         (options.quick ? "-quick" : "") + ".yaml"
                                   : options.out_path;
  out << "probing " << device.name << " (copy, read, bf16 GEMM)...\n" << std::flush;
  const calib::CudaProbes probes = calib::RunCudaProbes(options.quick);
  ThrowIfInterrupted();
  out << "  copy " << probes.copy.best << " GB/s, read " << probes.read.best << " GB/s, bf16 GEMM "
      << probes.flops.best << " TFLOP/s\n";
  std::vector<calib::GridPoint> grid = calib::CalibrationGrid(options.quick);
  uint64_t pool_blocks = calib::LargestStepBlocks(grid);
  pool_blocks += pool_blocks / 8;
  const int repetitions = options.quick ? 3 : 5;
  const auto progress = [&](int pass) {
    out << "\r  measured pass " << pass << "/" << repetitions << " over " << grid.size()
        << " steps" << (pass == 0 ? " (warm-up)" : "") << std::flush;
  };
  const std::vector<MeasuredStep> rows = calib::MeasureCudaGrid(
      grid, model, pool_blocks, repetitions, [] { ThrowIfInterrupted(); }, progress);
  out << '\n';
  DeviceProfile base = calib::CudaBaseProfile(probes, device);
  ProfileMeasuredOn measured_on;
  measured_on.host = host.hostname;
  measured_on.cpu_model = host.cpu_model;
  measured_on.cpu_signature = host.cpu_signature;
  measured_on.date_utc = host.date_utc;
  measured_on.build = {host.compiler, host.build_type, host.git_rev};
  measured_on.kernel_variant = "cuda " + device.name + " sm_" + std::to_string(device.cc_major) +
                               std::to_string(device.cc_minor) + " " + device.uuid + ", model " +
                               model.name + ", " + hw::cuda::CudaKernelChoices() +
                               (options.quick ? ", quick grid" : "");
  measured_on.threads = 1;
  base.measured_on = measured_on;
  calib::FitOptions fit_options;
  fit_options.hold = options.hold;
  fit_options.rows_label = RowsPathOf(out_path).filename().string();
  const calib::CalibrationFit fit = FitProfile(base, model, rows, fit_options);
  std::vector<std::string> labels;
  for (const calib::GridPoint& point : grid) labels.push_back(point.label);
  WriteFitOutputs(fit, model, labels, rows, fit_options, out_path, started, out);
  return 0;
}
#endif

// The gates of `--target cuda`: a device, then a passed self-check of it (exit 2 with one line).
int CalibrateCudaTarget(const CalibrateCommandOptions& options, std::ostream& out) {
  if (const std::string why = CudaTargetGate(); !why.empty()) {
    std::cerr << "feather calibrate --target cuda: " << why << '\n';
    return 2;
  }
  if (const std::string why = SelfcheckStampGate(options.selfcheck_stamp); !why.empty()) {
    std::cerr << "feather calibrate --target cuda: " << why << '\n';
    return 2;
  }
#if FEATHER_HAVE_CUDA
  return CalibrateCuda(options, out);
#else
  (void)out;
  std::cerr << "feather calibrate --target cuda: this feather was built without CUDA\n";
  return 2;
#endif
}

}  // namespace

int CalibrateCommand(const CalibrateCommandOptions& options, std::ostream& out) {
  // Before anything is measured: a live calibration takes minutes.
  for (const std::string& name : options.hold) {
    switch (calib::CheckHoldable(name)) {
      case calib::HoldCheck::kHoldable:
        break;
      case calib::HoldCheck::kUnknown:
        throw std::invalid_argument("--hold: '" + name +
                                    "' is no profile parameter (sim/engine/device_profile.cc)");
      case calib::HoldCheck::kNeverFitted:
        throw std::invalid_argument("--hold: " + name +
                                    " is never fitted (a capacity or peak figure), so there is "
                                    "nothing to hold");
    }
  }
  if (!options.refit_rows.empty()) return Refit(options, out);
  if (options.target == "cuda" && options.block_tokens != 16) {
    throw std::invalid_argument(
        "--block-tokens: the cuda calibration grid runs 16-token pages "
        "only (calib/cuda_calibration.h); drop --block-tokens");
  }
  if (options.target == "cuda") {
    const InterruptScope scope;
    try {
      return CalibrateCudaTarget(options, out);
    } catch (const Interrupted& interrupted) {
      RemoveRegisteredTempPaths();
      std::fflush(stdout);
      std::fprintf(stderr, "feather: calibrate %s; no profile written\n", interrupted.what());
      return interrupted.exit_code();
    }
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
