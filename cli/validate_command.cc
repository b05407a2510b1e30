// validate_command.cc: `feather validate` (see validate_command.h).
#include "cli/validate_command.h"


#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/atomic_file.h"
#include "cli/engines.h"
#include "cli/interrupt.h"
#include "hw/host_info.h"
#include "sim/model_engine.h"
#include "sim/run_output.h"
#include "sim/scenario.h"
#include "sim/scenario_run.h"

namespace feather {
namespace {

namespace fs = std::filesystem;
using OrderedJson = nlohmann::ordered_json;

// Executes each step on the real engine and prices the same plan with the model engine, so the
// per-step error is measured on identical plans.
class ShadowPricedEngine final : public Engine {
 public:
  ShadowPricedEngine(Engine& real, ModelEngine& model) : real_(real), model_(model) {}

  [[nodiscard]] std::string_view Name() const override { return real_.Name(); }

  [[nodiscard]] StepTiming Execute(const BatchPlan& plan) override {
    const StepTiming measured = real_.Execute(plan);
    const StepTiming predicted = model_.Execute(plan);
    ++steps_;
    if (measured.total_ns > 0) {
      abs_rel_error_sum_ += std::fabs(static_cast<double>(predicted.total_ns - measured.total_ns)) /
                            static_cast<double>(measured.total_ns);
    }
    measured_ns_ += static_cast<double>(measured.total_ns);
    predicted_ns_ += static_cast<double>(predicted.total_ns);
    for (size_t t = 0; t < kNumStepTerms; ++t) {
      measured_term_ns_[t] += static_cast<double>(measured.term_ns[t]);
      predicted_term_ns_[t] += static_cast<double>(predicted.term_ns[t]);
    }
    return measured;
  }

  [[nodiscard]] OrderedJson Report() const {
    OrderedJson terms = OrderedJson::object();
    for (size_t t = 0; t < kNumStepTerms; ++t) {
      terms[std::string(StepTermName(static_cast<StepTerm>(t)))] = {
          {"measured_s", measured_term_ns_[t] * 1e-9}, {"predicted_s", predicted_term_ns_[t] * 1e-9}};
    }
    return {{"steps", steps_},
            {"step_time_mape", steps_ > 0 ? abs_rel_error_sum_ / static_cast<double>(steps_) : 0.0},
            {"engine_time_s", {{"measured", measured_ns_ * 1e-9}, {"predicted", predicted_ns_ * 1e-9}}},
            {"terms", terms}};
  }

 private:
  Engine& real_;
  ModelEngine& model_;
  uint64_t steps_ = 0;
  double abs_rel_error_sum_ = 0;
  double measured_ns_ = 0;
  double predicted_ns_ = 0;
  std::array<double, kNumStepTerms> measured_term_ns_{};
  std::array<double, kNumStepTerms> predicted_term_ns_{};
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

struct Side {
  RunSummary summary;
  OrderedJson same_plans;  // only for the measured side
};

// Runs the scenario with `engine` ("cpu" or "model") and writes its run directory.
Side RunSide(const ValidateCommandOptions& options, const std::string& engine,
             const std::string& dir) {
  std::vector<std::string> overrides = options.overrides;
  overrides.push_back("engine=" + engine);
  overrides.push_back("profile=" + options.profile_path);
  const Scenario scenario = LoadScenarioFile(options.scenario_path, overrides);
  const PreparedRun prepared = PrepareRun(scenario);
  ThrowIfInterrupted();
  const Workload workload = GenerateWorkload(scenario.workload, scenario.seed);
  const std::unique_ptr<StopPolicy> policy = MakeScenarioPolicy(scenario);
  const auto poll = [](const SimProgress&) { ThrowIfInterrupted(); };
  Side side;
  SimResult result;
  if (engine == "model") {
    result = ExecuteRun(prepared, workload, *policy, poll);
  } else {
    const std::unique_ptr<Engine> real = MakeEngine(prepared);
    ModelEngine model(prepared.profile, prepared.model,
                      ModelEngineOptions{.cascade_attention = prepared.serving.cascade_attention});
    ShadowPricedEngine shadow(*real, model);
    result = ExecuteRunOn(prepared, workload, *policy, shadow, poll);
    side.same_plans = shadow.Report();
  }
  ThrowIfInterrupted();
  {
    const TempPathGuard temp(PartialOutputDir(dir));
    WriteRunOutputs(dir, result.records, result.summary, MetaFor(scenario, prepared),
                    ThrowIfInterrupted);
  }
  side.summary = result.summary;
  return side;
}

OrderedJson Compare(double measured, double predicted) {
  const double signed_error = measured != 0 ? (predicted - measured) / measured : 0.0;
  return {{"measured", measured},
          {"predicted", predicted},
          {"rel_error", std::fabs(signed_error)},
          {"signed_error", signed_error}};
}

void PrintTable(std::ostream& out, const OrderedJson& validation) {
  out << std::left << std::setw(18) << "metric" << std::right << std::setw(14) << "measured"
      << std::setw(14) << "predicted" << std::setw(12) << "error\n";
  for (const auto& [name, m] : validation["metrics"].items()) {
    out << std::left << std::setw(18) << name << std::right << std::fixed << std::setprecision(2)
        << std::setw(14) << m["measured"].get<double>() << std::setw(14)
        << m["predicted"].get<double>() << std::setw(10) << m["rel_error"].get<double>() * 100
        << " %\n";
  }
  const OrderedJson& same = validation["same_plans"];
  out << "same plans: " << same["steps"].get<uint64_t>() << " steps, step-time MAPE "
      << same["step_time_mape"].get<double>() * 100 << " %\n";
}

int Validate(const ValidateCommandOptions& options, std::ostream& out) {
  RegisterBuiltinEngines();
  const Scenario probe = LoadScenarioFile(options.scenario_path, options.overrides);
  const std::string dir =
      options.out_dir.empty() ? "out/validate/" + probe.name : options.out_dir;
  fs::create_directories(dir);
  const Side measured = RunSide(options, "cpu", dir + "/measured");
  const Side predicted = RunSide(options, "model", dir + "/predicted");
  const RunSummary& m = measured.summary;
  const RunSummary& p = predicted.summary;
  OrderedJson validation;
  validation["metrics"] = {
      {"throughput_tok_s", Compare(m.throughput_tok_s, p.throughput_tok_s)},
      {"mean_tbt_ms", Compare(m.mean_tbt_ms, p.mean_tbt_ms)},
      {"p99_tbt_ms", Compare(m.p99_tbt_ms, p.p99_tbt_ms)},
      {"mean_batch_size", Compare(m.mean_batch_size, p.mean_batch_size)},
      {"mean_ttft_ms", Compare(m.mean_ttft_ms, p.mean_ttft_ms)},
  };
  validation["same_plans"] = measured.same_plans;
  validation["scenario"] = options.scenario_path;
  validation["profile"] = options.profile_path;
  validation["overrides"] = options.overrides;
  validation["runs"] = {{"measured", "measured"}, {"predicted", "predicted"}};
  validation["provenance"] = ToJson(ReadHostInfo());
  ThrowIfInterrupted();
  WriteFileAtomically(fs::path(dir) / "validation.json", validation.dump(2) + "\n");
  if (options.json) {
    out << validation.dump(2) << '\n';
  } else {
    PrintTable(out, validation);
    out << "outputs: " << dir << "/validation.json, " << dir << "/measured/, " << dir
        << "/predicted/\n";
  }
  return 0;
}

}  // namespace

int ValidateCommand(const ValidateCommandOptions& options, std::ostream& out) {
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
