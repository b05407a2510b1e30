// scenario_run.cc: from a validated Scenario to a finished simulation (see scenario_run.h).
#include "sim/io/device_profile_yaml.h"
#include "sim/io/engine_cost_yaml.h"
#include "sim/io/model_config_yaml.h"
#include "sim/io/scenario_run.h"

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "policies/selector_factory.h"
#include "policies/stop_policy_factory.h"
#include "policies/stop_policy_io.h"
#include "base/input_error.h"
#include "sim/engine/model_engine.h"

namespace feather {
namespace {

struct EngineRegistry {
  std::mutex mutex;
  std::vector<std::pair<std::string, EngineFactory>> factories;
};

EngineRegistry& Registry() {
  static EngineRegistry registry;
  return registry;
}

EngineFactory FindEngine(const std::string& name) {
  EngineRegistry& registry = Registry();
  const std::lock_guard lock(registry.mutex);
  for (const auto& [registered, factory] : registry.factories) {
    if (registered == name) return factory;
  }
  return {};
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string joined;
  for (const std::string& name : names) joined += (joined.empty() ? "" : ", ") + name;
  return joined;
}

}  // namespace

void RegisterEngine(const std::string& name, EngineFactory factory) {
  EngineRegistry& registry = Registry();
  const std::lock_guard lock(registry.mutex);
  for (auto& [registered, existing] : registry.factories) {
    if (registered == name) {
      existing = std::move(factory);
      return;
    }
  }
  registry.factories.emplace_back(name, std::move(factory));
}

std::vector<std::string> AvailableEngines() {
  std::vector<std::string> names{"model"};
  EngineRegistry& registry = Registry();
  const std::lock_guard lock(registry.mutex);
  for (const auto& entry : registry.factories) names.push_back(entry.first);
  std::sort(names.begin(), names.end());
  return names;
}

PreparedRun PrepareRun(const Scenario& scenario) {
  if (scenario.engine != "model" && !FindEngine(scenario.engine)) {
    throw std::invalid_argument("engine '" + scenario.engine +
                                "' is not available in this build (available: " +
                                JoinNames(AvailableEngines()) + ")");
  }
  PreparedRun prepared;
  prepared.scenario = scenario;
  const ResolvedText model = ReadNamedFile(scenario.model, "scenarios/models", "model");
  prepared.model = ParseModelConfig(model.text, model.display_name);
  const ResolvedText profile = ReadProfileFile(scenario.profile);
  prepared.profile = ParseDeviceProfile(profile.text, profile.display_name);
  prepared.profile_file = profile.display_name;
  prepared.serving = scenario.serving;
  if (prepared.serving.kv_cache_blocks == 0) {
    try {
      prepared.serving.kv_cache_blocks =
          KvCacheBlocks(prepared.profile, prepared.model, scenario.serving.block_tokens,
                        scenario.serving.gpu_memory_utilization);
    } catch (const std::invalid_argument& e) {
      throw InputError(scenario.source, 0, "serving.gpu_memory_utilization", e.what());
    }
  }
  if (prepared.serving.engine == ServingEngine::kSglang) {
    // SGLang has no vLLM-style cascade path (sim/serving/sglang_batcher.h).
    prepared.serving.cascade_attention = false;
    if (prepared.serving.sglang.chunked_prefill_size == 0) {
      prepared.serving.sglang.chunked_prefill_size =
          ChunkedPrefillSizeFor(prepared.profile.memory_bytes);
    }
  }
  if (prepared.serving.scheduler_time == SchedulerTimeMode::kEngine) {
    const ResolvedText table =
        ReadNamedFile(scenario.engine_cost, "results/engine-cost", "scheduler_engine_cost");
    prepared.serving.engine_cost = ParseEngineCostTable(table.text, table.display_name)
                                       .For(EngineOperationFor(scenario.selector));
    prepared.engine_cost_file = table.display_name;
  }
  return prepared;
}

std::unique_ptr<StopPolicy> MakeScenarioPolicy(const Scenario& scenario) {
  std::unique_ptr<StopPolicy> policy = MakeStopPolicy(scenario.stop, scenario.stop_options);
  if (!scenario.policy_load.empty()) LoadStopPolicy(*policy, scenario.policy_load);
  policy->set_learning(scenario.policy_learning);
  return policy;
}

namespace {

// The scenario's selector, sized for the workload.
std::unique_ptr<CandidateSelector> MakeScenarioSelector(const Scenario& scenario,
                                                        const Workload& workload) {
  SelectorOptions options = scenario.selector_options;
  options.expected_requests = static_cast<uint32_t>(workload.size());
  return MakeSelector(scenario.selector, options);
}

}  // namespace

SimResult ExecuteRun(const PreparedRun& prepared, const Workload& workload, StopPolicy& policy,
                     const std::function<void(const SimProgress&)>& progress, uint64_t max_steps) {
  std::unique_ptr<Engine> engine = MakeEngine(prepared);
  return ExecuteRunOn(prepared, workload, policy, *engine, progress, max_steps);
}

SimResult ExecuteRunOn(const PreparedRun& prepared, const Workload& workload, StopPolicy& policy,
                       Engine& engine, const std::function<void(const SimProgress&)>& progress,
                       uint64_t max_steps) {
  std::unique_ptr<CandidateSelector> selector = MakeScenarioSelector(prepared.scenario, workload);
  ServingConfig serving = prepared.serving;
  if (max_steps > 0) serving.max_steps = max_steps;
  Simulator simulator(serving, workload, *selector, policy, engine);
  return simulator.Run(progress);
}

SteppedRun::SteppedRun(const std::string& scenario_path, const std::vector<std::string>& overrides)
    : scenario_(LoadScenarioFile(scenario_path, overrides)),
      prepared_(PrepareRun(scenario_)),
      workload_(GenerateWorkload(scenario_.workload, scenario_.seed)),
      policy_(MakeScenarioPolicy(scenario_)),
      engine_(MakeEngine(prepared_)) {
  selector_ = MakeScenarioSelector(scenario_, workload_);
  simulator_ = std::make_unique<Simulator>(prepared_.serving, workload_, *selector_, *policy_,
                                           *engine_);
}

std::unique_ptr<Engine> MakeEngine(const PreparedRun& prepared) {
  if (prepared.scenario.engine == "model") {
    return std::make_unique<ModelEngine>(
        prepared.profile, prepared.model,
        ModelEngineOptions{.cascade_attention = prepared.serving.cascade_attention,
                           .step_noise = prepared.scenario.step_noise.enabled,
                           .step_noise_seed = prepared.scenario.step_noise.seed});
  }
  const EngineFactory factory = FindEngine(prepared.scenario.engine);
  if (!factory) {
    throw std::invalid_argument("engine '" + prepared.scenario.engine +
                                "' is not available in this build (available: " +
                                JoinNames(AvailableEngines()) + ")");
  }
  return factory(prepared);
}

nlohmann::ordered_json ResolvedRunJson(const PreparedRun& prepared) {
  const ModelConfig& m = prepared.model;
  nlohmann::ordered_json out = {{"kv_cache_blocks", prepared.serving.kv_cache_blocks},
          {"kv_cache_tokens", prepared.serving.kv_cache_blocks * prepared.serving.block_tokens},
          {"model",
           {{"name", m.name},
            {"layers", m.layers},
            {"kv_bytes_per_token", m.KvBytesPerToken()},
            {"weight_bytes", m.WeightBytes()}}},
          {"profile", prepared.profile.name},
          {"profile_file", prepared.profile_file}};
  if (prepared.serving.engine == ServingEngine::kSglang) {
    out["sglang_chunked_prefill_size"] = prepared.serving.sglang.chunked_prefill_size;
    out["cascade_attention"] = prepared.serving.cascade_attention;  // off: SGLang has no cascade
  }
  if (prepared.serving.scheduler_time == SchedulerTimeMode::kEngine) {
    out["engine_cost_file"] = prepared.engine_cost_file;
    out["engine_cost_operation"] = EngineOperationName(prepared.serving.engine_cost.operation);
  }
  return out;
}

}  // namespace feather
