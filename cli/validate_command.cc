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
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/atomic_file.h"
#include "cli/engines.h"
#include "cli/selfcheck_command.h"
#include "cli/interrupt.h"
#include "hw/foreign_host.h"
#include "hw/host_info.h"
#include "hw/probes.h"
#include "sim/engine/device_profile.h"
#include "sim/engine/model_engine.h"
#include "sim/io/device_profile_yaml.h"
#include "sim/io/run_output.h"
#include "sim/io/scenario.h"
#include "sim/io/scenario_run.h"

namespace feather {
namespace {

namespace fs = std::filesystem;
using OrderedJson = nlohmann::ordered_json;

// Per-step comparison of the model with the real engine on identical plans, summed over every
// measured run.
struct SamePlanTotals {
  uint64_t steps = 0;
  double abs_rel_error_sum = 0;
  double measured_ns = 0;
  double predicted_ns = 0;
  std::array<double, kNumStepTerms> measured_term_ns{};
  std::array<double, kNumStepTerms> predicted_term_ns{};

  void Add(const StepTiming& measured, const StepTiming& predicted) {
    ++steps;
    if (measured.total_ns > 0) {
      abs_rel_error_sum += std::fabs(static_cast<double>(predicted.total_ns - measured.total_ns)) /
                           static_cast<double>(measured.total_ns);
    }
    measured_ns += static_cast<double>(measured.total_ns);
    predicted_ns += static_cast<double>(predicted.total_ns);
    for (size_t t = 0; t < kNumStepTerms; ++t) {
      measured_term_ns[t] += static_cast<double>(measured.term_ns[t]);
      predicted_term_ns[t] += static_cast<double>(predicted.term_ns[t]);
    }
  }

  [[nodiscard]] OrderedJson Report() const {
    OrderedJson terms = OrderedJson::object();
    for (size_t t = 0; t < kNumStepTerms; ++t) {
      terms[std::string(StepTermName(static_cast<StepTerm>(t)))] = {
          {"measured_s", measured_term_ns[t] * 1e-9}, {"predicted_s", predicted_term_ns[t] * 1e-9}};
    }
    return {{"steps", steps},
            {"step_time_mape", steps > 0 ? abs_rel_error_sum / static_cast<double>(steps) : 0.0},
            {"engine_time_s", {{"measured", measured_ns * 1e-9}, {"predicted", predicted_ns * 1e-9}}},
            {"terms", terms}};
  }
};

// Executes each step on the real engine and prices the same plan with the model engine, so the
// per-step error is measured on identical plans.
class ShadowPricedEngine final : public Engine {
 public:
  ShadowPricedEngine(Engine& real, ModelEngine& model, SamePlanTotals& totals)
      : real_(real), model_(model), totals_(totals) {}

  [[nodiscard]] std::string_view Name() const override { return real_.Name(); }

  [[nodiscard]] StepTiming Execute(const BatchPlan& plan) override {
    const StepTiming measured = real_.Execute(plan);
    totals_.Add(measured, model_.Execute(plan));
    return measured;
  }

 private:
  Engine& real_;
  ModelEngine& model_;
  SamePlanTotals& totals_;
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
// adds its steps to `same_plans`.
RunSummary RunSide(const ValidateCommandOptions& options, const std::string& engine,
                   const std::string& dir, SamePlanTotals& same_plans) {
  std::vector<std::string> overrides = options.overrides;
  overrides.push_back("engine=" + engine);
  overrides.push_back("profile=" + options.profile_path);
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
    ModelEngine model(prepared.profile, prepared.model,
                      ModelEngineOptions{.cascade_attention = prepared.serving.cascade_attention});
    ShadowPricedEngine shadow(*real, model, same_plans);
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

// Whether --profile was measured on this machine (hw/foreign_host.h, with a DRAM read probe of
// this host): "same host", "not recorded" (a spec profile), or the difference. A difference
// refuses the validation unless --allow-foreign-profile: its errors would measure the other
// machine, not the model.
std::string CheckProfileHost(const ValidateCommandOptions& options) {
  const ResolvedText text = ReadProfileFile(options.profile_path);
  const DeviceProfile profile = ParseDeviceProfile(text.text, text.display_name);
  if (!profile.measured_on) return "not recorded";
  hw::BandwidthOptions bandwidth;
  bandwidth.num_threads = static_cast<int>(profile.measured_on->threads);
  const double read_bw = hw::MeasureReadBandwidth(bandwidth).bytes_per_s;
  const std::optional<std::string> why = ForeignHostDifference(
      IdentityOf(*profile.measured_on), IdentityOf(ReadHostInfo(), read_bw));
  if (!why) return "same host";
  if (!options.allow_foreign_profile) {
    throw std::invalid_argument(
        "--profile " + text.display_name + ": " + *why +
        "; calibrate this machine first (feather calibrate --target cpu --out PROFILE.yaml) or "
        "pass --allow-foreign-profile");
  }
  std::fprintf(stderr, "feather: warning: --profile %s: %s (allowed by --allow-foreign-profile)\n",
               text.display_name.c_str(), why->c_str());
  return "foreign: " + *why;
}

// One metric: the mean of the measured runs against the prediction, and each run's value with
// their spread ((max − min) / mean), so an error can be read against the run-to-run noise.
OrderedJson Compare(const std::vector<double>& measured_runs, double predicted) {
  double sum = 0;
  for (const double v : measured_runs) sum += v;
  const double measured = sum / static_cast<double>(measured_runs.size());
  const auto [low, high] = std::minmax_element(measured_runs.begin(), measured_runs.end());
  const double signed_error = measured != 0 ? (predicted - measured) / measured : 0.0;
  return {{"measured", measured},
          {"predicted", predicted},
          {"rel_error", std::fabs(signed_error)},
          {"signed_error", signed_error},
          {"measured_runs", measured_runs},
          {"measured_spread", measured != 0 ? (*high - *low) / measured : 0.0}};
}

void PrintTable(std::ostream& out, const OrderedJson& validation) {
  out << std::left << std::setw(18) << "metric" << std::right << std::setw(14) << "measured"
      << std::setw(14) << "predicted" << std::setw(12) << "error" << std::setw(12)
      << "spread\n";
  for (const auto& [name, m] : validation["metrics"].items()) {
    out << std::left << std::setw(18) << name << std::right << std::fixed << std::setprecision(2)
        << std::setw(14) << m["measured"].get<double>() << std::setw(14)
        << m["predicted"].get<double>() << std::setw(10) << m["rel_error"].get<double>() * 100
        << " %" << std::setw(10) << m["measured_spread"].get<double>() * 100 << " %\n";
  }
  const OrderedJson& same = validation["same_plans"];
  out << "same plans: " << same["steps"].get<uint64_t>() << " steps, step-time MAPE "
      << same["step_time_mape"].get<double>() * 100 << " %\n";
}

// The measured runs' directory names: "measured" for one run, "measured-1" .. "measured-N".
std::vector<std::string> MeasuredRunNames(int repeat) {
  if (repeat == 1) return {"measured"};
  std::vector<std::string> names;
  for (int k = 1; k <= repeat; ++k) names.push_back("measured-" + std::to_string(k));
  return names;
}

int Validate(const ValidateCommandOptions& options, std::ostream& out) {
  if (options.repeat < 1) {
    throw std::invalid_argument("--repeat must be at least 1, got " +
                                std::to_string(options.repeat));
  }
  RegisterBuiltinEngines();
  const Scenario probe = LoadScenarioFile(options.scenario_path, options.overrides);
  const std::string host_check = CheckProfileHost(options);
  const std::string dir =
      options.out_dir.empty() ? "out/validate/" + probe.name : options.out_dir;
  fs::create_directories(dir);
  SamePlanTotals same_plans;
  const std::vector<std::string> measured_names = MeasuredRunNames(options.repeat);
  std::vector<RunSummary> measured;
  for (const std::string& name : measured_names) {
    measured.push_back(RunSide(options, options.engine, dir + "/" + name, same_plans));
  }
  const RunSummary predicted = RunSide(options, "model", dir + "/predicted", same_plans);
  auto compare = [&](double RunSummary::*metric) {
    std::vector<double> runs;
    for (const RunSummary& m : measured) runs.push_back(m.*metric);
    return Compare(runs, predicted.*metric);
  };
  OrderedJson validation;
  validation["metrics"] = {
      {"throughput_tok_s", compare(&RunSummary::throughput_tok_s)},
      {"mean_tbt_ms", compare(&RunSummary::mean_tbt_ms)},
      {"p99_tbt_ms", compare(&RunSummary::p99_tbt_ms)},
      {"mean_batch_size", compare(&RunSummary::mean_batch_size)},
      {"mean_ttft_ms", compare(&RunSummary::mean_ttft_ms)},
  };
  validation["same_plans"] = same_plans.Report();
  validation["scenario"] = options.scenario_path;
  validation["profile"] = options.profile_path;
  validation["profile_host_check"] = host_check;
  validation["overrides"] = options.overrides;
  validation["runs"] = {{"measured", measured_names}, {"predicted", "predicted"}};
  validation["provenance"] = ToJson(ReadHostInfo());
  ThrowIfInterrupted();
  WriteFileAtomically(fs::path(dir) / "validation.json", validation.dump(2) + "\n");
  if (options.json) {
    out << validation.dump(2) << '\n';
  } else {
    PrintTable(out, validation);
    out << "outputs: " << dir << "/validation.json, " << dir << "/{";
    for (const std::string& name : measured_names) out << name << ",";
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
