// validate_command.cc: `feather validate` (see validate_command.h).
#include "cli/validate_command.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "calib/cpu_calibration.h"
#include "calib/harness.h"
#include "calib/rows_csv.h"
#include "cli/atomic_file.h"
#include "cli/engines.h"
#include "cli/interrupt.h"
#include "cli/selfcheck_command.h"
#include "cli/validation_report.h"
#include "hw/cpu_engine.h"
#include "hw/foreign_host.h"
#include "hw/gemm.h"
#include "hw/host_info.h"
#include "hw/probes.h"
#include "hw/synthetic_batch.h"
#include "sim/engine/device_profile.h"
#include "sim/engine/model_engine.h"
#include "sim/engine/step_noise.h"
#include "sim/io/device_profile_yaml.h"
#include "sim/io/run_output.h"
#include "sim/io/scenario.h"
#include "sim/io/scenario_run.h"

namespace feather {
namespace {

namespace fs = std::filesystem;
using OrderedJson = nlohmann::ordered_json;

// What the measured runs' steps give: the same-plan comparison and the rows themselves (written
// as same-plan-rows.csv, the calibration rows' format, so they can be set beside cpu-rows.csv or
// refitted with `feather calibrate --refit`).
struct SamePlanSteps {
  SamePlanComparison comparison;
  std::vector<std::string> labels;
  std::vector<MeasuredStep> rows;
};

// Executes each step on the real engine and prices the same plan with the model engine
// (noiseless), so the per-step error is measured on identical plans.
class ShadowPricedEngine final : public Engine {
 public:
  ShadowPricedEngine(Engine& real, const ModelEngine& model, bool cascade, std::string run,
                     SamePlanSteps& steps)
      : real_(real), model_(model), cascade_(cascade), run_(std::move(run)), steps_(steps) {}

  [[nodiscard]] std::string_view Name() const override { return real_.Name(); }

  [[nodiscard]] StepTiming Execute(const BatchPlan& plan) override {
    const StepTiming measured = real_.Execute(plan);
    const StepShape shape =
        ShapeStep(plan, model_.model(), cascade_, static_cast<uint32_t>(model_.profile().sm_count));
    steps_.comparison.Add(shape, measured, model_.Price(plan));
    steps_.labels.push_back(run_ + " step " + std::to_string(++step_) + " " +
                            std::string(StepKindName(KindOf(shape))) +
                            (shape.cascade() ? " cascade" : ""));
    steps_.rows.push_back({shape, measured});
    return measured;
  }

 private:
  Engine& real_;
  const ModelEngine& model_;
  bool cascade_;
  std::string run_;
  SamePlanSteps& steps_;
  uint64_t step_ = 0;
};

RunOutputMeta MetaFor(const Scenario& scenario, const PreparedRun& prepared) {
  RunOutputMeta meta;
  meta.scenario = ScenarioToJson(scenario);
  meta.scenario["resolved"] = ResolvedRunJson(prepared);
  nlohmann::json provenance = ToJson(ReadHostInfo());
  provenance.erase("date_utc");
  meta.provenance = provenance;
  meta.engine = scenario.engine;
  meta.selector = scenario.selector;
  meta.stop_policy = scenario.stop;
  return meta;
}

// Runs the scenario with `engine` ("cpu" or "model") and writes its run directory. A cpu run
// adds its steps to `same_plans`. `noise_seed` > 0 turns on the model engine's step noise with
// that seed (sim/engine/step_noise.h).
RunSummary RunSide(const ValidateCommandOptions& options, const std::string& engine,
                   const std::string& dir, SamePlanSteps& same_plans, uint64_t noise_seed = 0) {
  std::vector<std::string> overrides = options.overrides;
  overrides.push_back("engine=" + engine);
  overrides.push_back("profile=" + options.profile_path);
  if (noise_seed > 0) {
    overrides.push_back("step_noise.enabled=true");
    overrides.push_back("step_noise.seed=" + std::to_string(noise_seed));
  }
  const Scenario scenario = LoadScenarioFile(options.scenario_path, overrides);
  const PreparedRun prepared = PrepareRun(scenario);
  ThrowIfInterrupted();
  const Workload workload = GenerateWorkload(scenario.workload, scenario.seed);
  const std::unique_ptr<StopPolicy> policy = MakeScenarioPolicy(scenario);
  const auto poll = [](const SimProgress&) { ThrowIfInterrupted(); };
  SimResult result;
  if (engine == "model") {
    result = ExecuteRun(prepared, workload, *policy, poll);
  } else {
    const std::unique_ptr<Engine> real = MakeEngine(prepared);
    const ModelEngine model(
        prepared.profile, prepared.model,
        ModelEngineOptions{.cascade_attention = prepared.serving.cascade_attention});
    ShadowPricedEngine shadow(*real, model, prepared.serving.cascade_attention,
                              fs::path(dir).filename().string(), same_plans);
    result = ExecuteRunOn(prepared, workload, *policy, shadow, poll);
  }
  ThrowIfInterrupted();
  {
    const TempPathGuard temp(PartialOutputDir(dir));
    WriteRunOutputs(dir, result.records, result.summary, MetaFor(scenario, prepared),
                    ThrowIfInterrupted);
  }
  return result.summary;
}

// This host's DRAM read bandwidth and GEMM peak, probed with a profile's thread count (what the
// host check compares with the profile's).
struct HostSpeed {
  double read_bw = 0;
  double gemm_peak = 0;
};

// The probes of calibration (hw/probes.h) with `threads` and its settings (`quick`: the short
// ones of a `calibrate --quick` profile); the GEMM peak only when `gemm` (0 otherwise).
HostSpeed ProbeHostSpeed(int threads, bool quick, bool gemm = true) {
  hw::BandwidthOptions bandwidth = quick ? hw::BandwidthOptions::Quick() : hw::BandwidthOptions{};
  bandwidth.num_threads = threads;
  const hw::PeakGemmOptions peak = quick ? hw::PeakGemmOptions::Quick() : hw::PeakGemmOptions{};
  return {hw::MeasureReadBandwidth(bandwidth).bytes_per_s,
          gemm ? hw::MeasurePeakGemmFlops(hw::DefaultGemmBackend(), threads, peak).flops_per_s : 0};
}

// A way --profile does not describe this run (`why`): refused, the message ending in `remedy`,
// unless --allow-foreign-profile, which turns it into one warning line; returns the verdict
// validation.json records, "foreign: WHY".
std::string RefuseUnlessAllowed(const ValidateCommandOptions& options, const std::string& name,
                                const std::string& why, const std::string& remedy) {
  if (!options.allow_foreign_profile) {
    throw std::invalid_argument("--profile " + name + ": " + why + "; " + remedy);
  }
  std::fprintf(stderr, "feather: warning: --profile %s: %s (allowed by --allow-foreign-profile)\n",
               name.c_str(), why.c_str());
  return "foreign: " + why;
}

// Whether --profile was measured on this machine (hw/foreign_host.h, with the DRAM read and GEMM
// peak probes of this host: `speed` when they were just taken with the profile's thread count and
// probe settings, else taken here): "same host", "not recorded" (a spec profile), or the
// difference. A difference refuses the validation unless --allow-foreign-profile: its errors
// would measure the other machine, not the model.
std::string CheckProfileHost(const ValidateCommandOptions& options, const std::string& name,
                             const DeviceProfile& profile, std::optional<HostSpeed> speed) {
  if (!profile.measured_on) return "not recorded";
  // A CPU profile's dense_flops_per_s is its host's GEMM peak probe; a GPU profile's is the GPU's.
  const bool cpu = options.engine == "cpu";
  if (!speed) {
    speed = ProbeHostSpeed(static_cast<int>(profile.measured_on->threads),
                           profile.measured_on->probes == "quick", cpu);
  }
  const std::optional<std::string> why =
      ForeignHostDifference(IdentityOf(*profile.measured_on, cpu ? profile.dense_flops_per_s : 0),
                            IdentityOf(ReadHostInfo(), speed->read_bw, speed->gemm_peak));
  if (!why) return "same host";
  return RefuseUnlessAllowed(
      options, name, *why,
      "calibrate this machine first (feather calibrate --target cpu --out PROFILE.yaml) or pass "
      "--allow-foreign-profile");
}

// Whether --profile was calibrated with the scenario's KV page size (hw/foreign_host.h
// BlockTokensDifference): "same pages (N tokens)", "not recorded" (a spec profile), or the
// difference, refused unless --allow-foreign-profile as a foreign host is: the decode and cascade
// terms were fitted to kernels reading other pages.
std::string CheckProfileBlockTokens(const ValidateCommandOptions& options, const std::string& name,
                                    const DeviceProfile& profile, uint32_t block_tokens) {
  if (!profile.measured_on) return "not recorded";
  const std::optional<std::string> why = BlockTokensDifference(*profile.measured_on, block_tokens);
  if (!why) return "same pages (" + std::to_string(block_tokens) + " tokens)";
  return RefuseUnlessAllowed(options, name, *why, "or pass --allow-foreign-profile");
}

// The machine's speed around the measured runs against the probes the profile recorded
// (issue 20: this project's VM moved its GEMM speed by ~9 % within minutes, a validation's whole
// throughput budget, and a miss must say whether the model or the machine moved). The probes of
// calibration (hw/probes.h: DRAM read, peak fp32 GEMM) with the settings the profile records
// (measured_on.probes: full, or quick for a `calibrate --quick` profile, whose GEMM peak comes
// from smaller products) and its thread count, before each measured run and after the last;
// about 2 s each (full). CPU engine only.
// The step probe's grid: four points of the quick calibration grid (calib/cpu_calibration.h),
// decode of 4, 16 and 64 requests over private contexts of about 1,024 tokens and one 256-token
// prefill chunk after 1,024 cached tokens: the gemm-bound and the attention-bound ends of the
// validation scenarios' steps. The 4-request step is the few-token end, where Eigen's GEMMs
// repack their weights on every call (the profile's gemm_batched_fixed_ns) unless the skinny
// kernel takes them (gemm_skinny_*): on a Zen 5 VM such steps ran 1.14-1.22x their price in some
// validations with Eigen's product and 0.99-1.08x in others while the 16- and 64-request steps
// stayed within x0.96-1.06 (results/validation/issue-20-zen5), so its ratio is also reported
// alone (small_step_ratio). With cpu-small a probe (a warm-up and 3 timed passes)
// adds about 2-3 s to the DRAM and GEMM probes on the reference VM (measured 2026-11-25, on a
// slow hour).
constexpr uint32_t kSmallStepTokens = 8;  // steps of at most this many tokens: small_step_ratio
std::vector<calib::GridPoint> StepProbeGrid() {
  std::vector<calib::GridPoint> picked;
  for (calib::GridPoint& point : calib::CalibrationGrid(true)) {
    const hw::SyntheticBatchSpec& s = point.spec;
    const bool decode =
        s.prefill_requests == 0 && s.groups == 0 && s.suffix_tokens == 1024 &&
        (s.decode_requests == 4 || s.decode_requests == 16 || s.decode_requests == 64);
    const bool prefill = s.decode_requests == 0 && s.prefill_requests == 1 &&
                         s.prefill_chunk_tokens == 256 && s.prefill_context_tokens == 1024;
    if (decode || prefill) picked.push_back(std::move(point));
  }
  return picked;
}

class HostProbes {
 public:
  HostProbes(const ValidateCommandOptions& options, const DeviceProfile& profile,
             const ModelConfig& model)
      : model_(model), pricer_(profile, model) {
    if (!options.host_probes) {
      skipped_ = "off (--no-host-probes)";
      return;
    }
    if (options.engine != "cpu") {
      skipped_ = "not taken: the real engine is " + options.engine;
      return;
    }
    threads_ = hw::UsableThreads();
    if (profile.measured_on) {
      threads_ = static_cast<int>(profile.measured_on->threads);
      if (profile.measured_on->read_bw_bytes_per_s > 0) {
        profile_read_bw_ = profile.measured_on->read_bw_bytes_per_s;
      }
      if (profile.dense_flops_per_s > 0) profile_gemm_ = profile.dense_flops_per_s;
      quick_ = profile.measured_on->probes == "quick";
      // The step probe's engines run the kernels as the measured runs will (the cpu engine
      // factory applies the same settings, cli/engines.cc).
      kernels_ = hw::WithProfileKernels({}, profile);
      // ... and orders its timed runs as calibration did, so its ratio compares like with like.
      primed_ = profile.measured_on->row_order == "primed";
    }
    step_grid_ = StepProbeGrid();
    // The profile's page size, so that the step probe's engine reads KV as calibration's did.
    if (profile.measured_on) {
      calib::SetGridBlockTokens(step_grid_, CalibratedBlockTokens(*profile.measured_on));
    }
    step_pool_blocks_ = calib::LargestStepBlocks(step_grid_);
  }

  // Probes the host now; `at` says when ("before measured-1", "after measured-3").
  void Take(const std::string& at) {
    if (!skipped_.empty()) return;
    const HostSpeed speed = ProbeHostSpeed(threads_, quick_);
    Probe probe{at, speed.read_bw, speed.gemm_peak};
    TakeStepProbe(probe);
    probes_.push_back(std::move(probe));
    ThrowIfInterrupted();
  }

  // The first probe's DRAM read bandwidth and GEMM peak, taken with the profile's thread count
  // and probe settings (what the host check probes), if a probe was taken.
  [[nodiscard]] std::optional<HostSpeed> FirstSpeed() const {
    if (probes_.empty()) return std::nullopt;
    return HostSpeed{probes_.front().read_bw, probes_.front().gemm};
  }

  // "host_probes" of validation.json: the profile's figures, each probe with its ratios to them
  // (null where the profile recorded none) and the range of each ratio; the step probe's ratios
  // (measured / the profile's price) and their ranges.
  [[nodiscard]] OrderedJson ToJson() const {
    if (!skipped_.empty()) return skipped_;
    OrderedJson out;
    out["threads"] = threads_;
    out["settings"] = quick_ ? "quick" : "full";
    out["profile"] = {{"read_bw_bytes_per_s", Nullable(profile_read_bw_)},
                      {"dense_flops_per_s", Nullable(profile_gemm_)}};
    OrderedJson list = OrderedJson::array();
    for (const Probe& p : probes_) {
      list.push_back({{"at", p.at},
                      {"read_bw_bytes_per_s", p.read_bw},
                      {"gemm_peak_flops_per_s", p.gemm},
                      {"read_bw_ratio", Ratio(p.read_bw, profile_read_bw_)},
                      {"gemm_peak_ratio", Ratio(p.gemm, profile_gemm_)},
                      {"step_ratio", p.step_ratio},
                      {"step_gemm_ratio", p.step_gemm_ratio},
                      {"small_step_ratio", p.small_step_ratio}});
    }
    out["probes"] = list;
    out["read_bw_ratio_range"] = Range(&Probe::read_bw, profile_read_bw_);
    out["gemm_peak_ratio_range"] = Range(&Probe::gemm, profile_gemm_);
    out["step_ratio_range"] = Range(&Probe::step_ratio, 1.0);
    out["step_gemm_ratio_range"] = Range(&Probe::step_gemm_ratio, 1.0);
    out["small_step_ratio_range"] = Range(&Probe::small_step_ratio, 1.0);
    OrderedJson labels = OrderedJson::array();
    for (const calib::GridPoint& point : step_grid_) labels.push_back(point.label);
    out["step_probe_grid"] = labels;
    return out;
  }

 private:
  hw::CpuEngineOptions kernels_;  // the profile's kernel settings, for the step probe's engines
  bool primed_ = false;           // the profile's measured_on.row_order is "primed"
  struct Probe {
    std::string at;
    double read_bw = 0;
    double gemm = 0;
    double step_ratio = 0;        // measured / priced step time over StepProbeGrid
    double step_gemm_ratio = 0;   // the same for the gemm term
    double small_step_ratio = 0;  // the same over its steps of <= kSmallStepTokens tokens
  };
  // The step probe (issue 20 item 3): the bandwidth and GEMM-peak probes miss how fast the
  // engine runs its steps. On 2026-11-25 a calibration repeated right after a validation measured
  // every grid step 17 % slower (gemm 19 %) while those probes read only 3-6 % lower
  // (results/validation/issue-20-drift). So the probe also runs StepProbeGrid on the real CPU
  // engine (one warm-up and 3 timed passes, the median kept per step, calib/harness.h) and
  // divides the measured step time (total, and the gemm term alone) by the profile's price of
  // the same shapes: > 1 means the engine runs slower now than the profile says.
  void TakeStepProbe(Probe& probe) {
    const std::vector<calib::StepMeasurement> steps = calib::MeasureCpuGrid(
        step_grid_, model_, step_pool_blocks_, threads_, hw::DefaultGemmBackend(), 3,
        ThrowIfInterrupted, {}, kernels_, primed_);
    double measured = 0, priced = 0, measured_gemm = 0, priced_gemm = 0;
    double measured_small = 0, priced_small = 0;
    for (const calib::StepMeasurement& step : steps) {
      const StepTiming price = pricer_.Price(step.row.shape);
      measured += static_cast<double>(step.row.measured.total_ns);
      priced += static_cast<double>(price.total_ns);
      measured_gemm += static_cast<double>(step.row.measured.term(StepTerm::kGemm));
      priced_gemm += static_cast<double>(price.term(StepTerm::kGemm));
      if (step.row.shape.new_tokens <= kSmallStepTokens) {
        measured_small += static_cast<double>(step.row.measured.total_ns);
        priced_small += static_cast<double>(price.total_ns);
      }
    }
    probe.step_ratio = priced > 0 ? measured / priced : 0;
    probe.step_gemm_ratio = priced_gemm > 0 ? measured_gemm / priced_gemm : 0;
    probe.small_step_ratio = priced_small > 0 ? measured_small / priced_small : 0;
  }

  static OrderedJson Nullable(std::optional<double> value) {
    return value ? OrderedJson(*value) : OrderedJson(nullptr);
  }
  static OrderedJson Ratio(double value, std::optional<double> reference) {
    return reference ? OrderedJson(value / *reference) : OrderedJson(nullptr);
  }
  [[nodiscard]] OrderedJson Range(double Probe::*field, std::optional<double> reference) const {
    if (!reference || probes_.empty()) return nullptr;
    double low = probes_.front().*field, high = low;
    for (const Probe& p : probes_) {
      low = std::min(low, p.*field);
      high = std::max(high, p.*field);
    }
    return OrderedJson::array({low / *reference, high / *reference});
  }

  std::string skipped_;  // why no probes are taken; empty when they are
  int threads_ = 1;
  bool quick_ = false;  // the profile's probes were calibrate --quick's
  std::optional<double> profile_read_bw_;
  std::optional<double> profile_gemm_;
  // The step probe: the scenario's model, the profile's prices, StepProbeGrid and the pool its
  // largest step needs (set when probes are taken).
  ModelConfig model_;
  StepPricer pricer_;
  std::vector<calib::GridPoint> step_grid_;
  uint64_t step_pool_blocks_ = 0;
  std::vector<Probe> probes_;
};

void PrintTable(std::ostream& out, const OrderedJson& validation) {
  out << std::left << std::setw(18) << "metric" << std::right << std::setw(12) << "measured"
      << std::setw(10) << "spread" << std::setw(12) << "predicted" << std::setw(10) << "error"
      << std::setw(26) << "predicted interval"
      << "  verdict\n";
  for (const auto& [name, m] : validation["metrics"].items()) {
    out << std::left << std::setw(18) << name << std::right << std::fixed << std::setprecision(2)
        << std::setw(12) << m["measured"].get<double>() << std::setw(8)
        << m["measured_spread"].get<double>() * 100 << " %" << std::setw(12)
        << m["predicted_mean"].get<double>() << std::setw(8)
        << m["mean_rel_error"].get<double>() * 100 << " %" << std::setw(12)
        << m["predicted_interval"][0].get<double>() << " .. " << std::setw(10)
        << m["predicted_interval"][1].get<double>() << "  " << m["verdict"].get<std::string>()
        << "\n";
  }
  const OrderedJson& same = validation["same_plans"];
  out << "same plans: " << same["steps"].get<uint64_t>() << " steps, step-time MAPE "
      << same["step_time_mape"].get<double>() * 100 << " %; error share by term:";
  for (const auto& [term, t] : same["terms"].items()) {
    if (t["steps"].get<uint64_t>() == 0) continue;
    out << " " << term << " " << t["error_share"].get<double>() * 100 << " %";
  }
  if (same.contains("noise_floor")) {
    out << "\nnoise floor (the machine's step noise, profile step_noise): step-time MAPE "
        << same["noise_floor"]["step_time_mape"].get<double>() * 100 << " %";
  }
  out << "\n";
  const OrderedJson& host = validation["host_probes"];
  if (host.is_string()) {
    out << "host probes: " << host.get<std::string>() << "\n";
  } else {
    out << "host probes (" << host["probes"].size() << ", over the profile's):";
    const std::pair<const char*, const char*> ranges[] = {
        {" DRAM read ", "read_bw_ratio_range"},
        {", GEMM peak ", "gemm_peak_ratio_range"},
        {", engine steps (measured / priced) ", "step_ratio_range"},
        {" (gemm ", "step_gemm_ratio_range"},
        {"; steps of <= 8 tokens ", "small_step_ratio_range"}};
    for (const auto& [label, key] : ranges) {
      out << label;
      if (!host.contains(key) || host[key].is_null()) {
        out << "not recorded";
      } else {
        out << "x" << std::setprecision(3) << host[key][0].get<double>() << "-"
            << host[key][1].get<double>();
      }
    }
    out << ")\n";
  }
}

// The measured runs' directory names: "measured" for one run, "measured-1" .. "measured-N".
std::vector<std::string> MeasuredRunNames(int repeat) {
  if (repeat == 1) return {"measured"};
  std::vector<std::string> names;
  for (int k = 1; k <= repeat; ++k) names.push_back("measured-" + std::to_string(k));
  return names;
}

// What the noisy model runs drew from: per term the profile's per-step spread and its run-level
// drift, and each run's drift factors (seed k + 1 for run k, as RunSide passes it; 1 without
// drift), so that a reader can tell a run that drew a slow machine from one that did not.
OrderedJson NoiseReport(const ProfileStepNoise& noise, std::span<const RunSummary> runs) {
  const std::array<double, kNumStepTerms> cv = StepNoiseCv(noise);
  const std::array<double, kNumStepTerms> drift = StepNoiseDrift(noise);
  OrderedJson report;
  for (const ProfileTermNoise& term : noise.terms) {
    report["terms"][term.term] = {{"rel_stdev", term.rel_stdev},
                                  {"drift_rel_stdev", term.drift_rel_stdev}};
  }
  report["run_factors"] = OrderedJson::array();
  for (size_t k = 0; k < runs.size(); ++k) {
    const StepNoise draw(cv, k + 1, drift);
    OrderedJson factors;
    for (const ProfileTermNoise& term : noise.terms) {
      if (const std::optional<StepTerm> t = StepTermFromName(term.term)) {
        factors[term.term] = draw.run_factors()[static_cast<size_t>(*t)];
      }
    }
    report["run_factors"].push_back(factors);
  }
  return report;
}

// The noisy model runs' directory names: "predicted-noise-1" .. "predicted-noise-M", none when
// the profile has no step_noise section or M < 2 (one draw says nothing about a spread).
std::vector<std::string> NoisyRunNames(const DeviceProfile& profile, int model_repeat) {
  if (!profile.step_noise || model_repeat < 2) return {};
  std::vector<std::string> names;
  for (int k = 1; k <= model_repeat; ++k) names.push_back("predicted-noise-" + std::to_string(k));
  return names;
}

int Validate(const ValidateCommandOptions& options, std::ostream& out) {
  if (options.repeat < 1) {
    throw std::invalid_argument("--repeat must be at least 1, got " +
                                std::to_string(options.repeat));
  }
  if (options.model_repeat < 0) {
    throw std::invalid_argument("--model-repeat must be at least 0, got " +
                                std::to_string(options.model_repeat));
  }
  const int model_repeat = options.model_repeat > 0 ? options.model_repeat : options.repeat;
  RegisterBuiltinEngines();
  const Scenario probe = LoadScenarioFile(options.scenario_path, options.overrides);
  const ResolvedText profile_text = ReadProfileFile(options.profile_path);
  const DeviceProfile profile = ParseDeviceProfile(profile_text.text, profile_text.display_name);
  const std::vector<std::string> measured_names = MeasuredRunNames(options.repeat);
  // The first host probe comes before the host check, which reuses its read bandwidth.
  // The scenario priced by --profile: the step probe's model, and the same-plan rows' pricer.
  const PreparedRun priced = PrepareRun(LoadScenarioFile(options.scenario_path, [&] {
    std::vector<std::string> o = options.overrides;
    o.push_back("profile=" + options.profile_path);
    return o;
  }()));
  const std::string block_check = CheckProfileBlockTokens(options, profile_text.display_name,
                                                          profile, priced.serving.block_tokens);
  HostProbes host_probes(options, profile, priced.model);
  host_probes.Take("before " + measured_names.front());
  const std::string host_check = CheckProfileHost(options, profile_text.display_name, profile,
                                                  host_probes.FirstSpeed());
  const std::vector<std::string> noisy_names = NoisyRunNames(profile, model_repeat);
  const std::string dir = options.out_dir.empty() ? "out/validate/" + probe.name : options.out_dir;
  fs::create_directories(dir);
  SamePlanSteps same_plans;
  if (profile.step_noise) same_plans.comparison.SetNoise(StepNoiseCv(*profile.step_noise));
  std::vector<RunSummary> measured;
  for (size_t k = 0; k < measured_names.size(); ++k) {
    if (k > 0) host_probes.Take("before " + measured_names[k]);
    measured.push_back(RunSide(options, options.engine, dir + "/" + measured_names[k], same_plans));
  }
  host_probes.Take("after " + measured_names.back());
  const RunSummary predicted = RunSide(options, "model", dir + "/predicted", same_plans);
  std::vector<RunSummary> noisy;
  for (size_t k = 0; k < noisy_names.size(); ++k) {
    noisy.push_back(RunSide(options, "model", dir + "/" + noisy_names[k], same_plans, k + 1));
  }
  auto compare = [&](const char* name, double RunSummary::*metric) {
    std::vector<double> runs, model_runs;
    for (const RunSummary& m : measured) runs.push_back(m.*metric);
    for (const RunSummary& m : noisy) model_runs.push_back(m.*metric);
    return CompareMetric(runs, predicted.*metric, model_runs, MetricTarget(name));
  };
  OrderedJson validation;
  validation["metrics"] = {
      {"throughput_tok_s", compare("throughput_tok_s", &RunSummary::throughput_tok_s)},
      {"mean_tbt_ms", compare("mean_tbt_ms", &RunSummary::mean_tbt_ms)},
      {"p99_tbt_ms", compare("p99_tbt_ms", &RunSummary::p99_tbt_ms)},
      {"mean_batch_size", compare("mean_batch_size", &RunSummary::mean_batch_size)},
      {"mean_ttft_ms", compare("mean_ttft_ms", &RunSummary::mean_ttft_ms)},
  };
  std::vector<std::string> failed;
  for (const auto& [name, m] : validation["metrics"].items()) {
    if (!m["pass"].get<bool>()) failed.push_back(name);
  }
  validation["verdict"] = {{"pass", failed.empty()}, {"failed", failed}};
  validation["same_plans"] = same_plans.comparison.Report();
  validation["same_plans"]["rows"] = "same-plan-rows.csv";
  validation["scenario"] = options.scenario_path;
  validation["profile"] = options.profile_path;
  validation["profile_host_check"] = host_check;
  validation["profile_block_tokens_check"] = block_check;
  validation["host_probes"] = host_probes.ToJson();
  validation["overrides"] = options.overrides;
  validation["runs"] = {
      {"measured", measured_names}, {"predicted", "predicted"}, {"predicted_noise", noisy_names}};
  if (!noisy_names.empty()) validation["predicted_noise"] = NoiseReport(*profile.step_noise, noisy);
  validation["provenance"] = ToJson(ReadHostInfo());
  ThrowIfInterrupted();
  WriteFileAtomically(fs::path(dir) / "same-plan-rows.csv",
                      calib::RowsToCsv(same_plans.labels, same_plans.rows,
                                       StepPricer(priced.profile, priced.model), 0));
  WriteFileAtomically(fs::path(dir) / "validation.json", validation.dump(2) + "\n");
  if (options.json) {
    out << validation.dump(2) << '\n';
  } else {
    PrintTable(out, validation);
    out << "outputs: " << dir << "/validation.json, " << dir << "/same-plan-rows.csv, " << dir
        << "/{";
    for (const std::string& name : measured_names) out << name << ",";
    for (const std::string& name : noisy_names) out << name << ",";
    out << "predicted}/\n";
  }
  return 0;
}

}  // namespace

int ValidateCommand(const ValidateCommandOptions& options, std::ostream& out) {
  if (options.engine != "cpu" && options.engine != "cuda") {
    throw std::invalid_argument("--engine must be cpu or cuda, got '" + options.engine + "'");
  }
  if (options.engine == "cuda") {
    if (const std::string why = CudaTargetGate(); !why.empty()) {
      std::cerr << "feather validate --engine cuda: " << why << '\n';
      return 2;
    }
  }
  const InterruptScope scope;
  try {
    return Validate(options, out);
  } catch (const Interrupted& interrupted) {
    RemoveRegisteredTempPaths();
    std::fflush(stdout);
    std::fprintf(stderr,
                 "feather: validate %s; finished run directories kept, validation.json not "
                 "written\n",
                 interrupted.what());
    return interrupted.exit_code();
  }
}

}  // namespace feather
