// scenario_run.h: turns a validated Scenario into a run: loads the model description and the
// device profile (built-in or from disk), sizes the KV pool, generates the workload, builds the
// selector, the stop policy and the engine, and runs the serving loop.
//
// The CLI's `run`, `pretrain` (and later `sweep`, `validate`) all go through here, so a scenario
// means the same thing whichever command runs it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "policies/selector.h"
#include "policies/stop_policy.h"
#include "sim/engine/device_profile.h"
#include "sim/engine/engine.h"
#include "sim/engine/model_config.h"
#include "sim/io/scenario.h"
#include "sim/serving/simulator.h"
#include "sim/workload/workload.h"

namespace feather {

struct PreparedRun {
  Scenario scenario;
  ModelConfig model;
  DeviceProfile profile;
  std::string profile_file;  // the file it was read from (ReadProfileFile's display name)
  ServingConfig serving;     // scenario.serving with kv_cache_blocks (and engine_cost) resolved
  std::string engine_cost_file;  // `scheduler_time: engine`: the cost table it was read from
};

// Real engines (hw/: `cpu`, later `cuda`) live outside sim/, which must not link them: the
// program registers a factory per engine name at startup (cli/engines.h), and scenarios pick one
// by name. The model engine is built in. Registering a name twice replaces the factory.
using EngineFactory = std::function<std::unique_ptr<Engine>(const PreparedRun&)>;
void RegisterEngine(const std::string& name, EngineFactory factory);
// "model" plus the registered names, sorted.
[[nodiscard]] std::vector<std::string> AvailableEngines();

// Loads model and profile and sizes the KV pool. Throws InputError for bad files and for a
// model that does not fit the device; std::invalid_argument for an engine this build lacks.
[[nodiscard]] PreparedRun PrepareRun(const Scenario& scenario);

// The engine the prepared run asks for (the model engine, or a registered real one).
[[nodiscard]] std::unique_ptr<Engine> MakeEngine(const PreparedRun& prepared);

// The stop policy a scenario asks for: fresh, or loaded from scheduler.policy.load, learning or
// frozen as scheduler.policy.learning says.
[[nodiscard]] std::unique_ptr<StopPolicy> MakeScenarioPolicy(const Scenario& scenario);

// Runs `workload` under `prepared` with `policy` (borrowed, so pretraining can carry one policy
// across several runs). `max_steps` (0 = the scenario's) caps engine steps.
[[nodiscard]] SimResult ExecuteRun(const PreparedRun& prepared, const Workload& workload,
                                   StopPolicy& policy,
                                   const std::function<void(const SimProgress&)>& progress = {},
                                   uint64_t max_steps = 0);

// The same on a caller-provided engine (a wrapper that also prices each executed plan, say).
[[nodiscard]] SimResult ExecuteRunOn(const PreparedRun& prepared, const Workload& workload,
                                     StopPolicy& policy, Engine& engine,
                                     const std::function<void(const SimProgress&)>& progress = {},
                                     uint64_t max_steps = 0);

// A scenario's serving loop for a caller that steps it (Simulator::Schedule / Complete): the
// Python API's feather.Simulation, the vLLM golden test. Owns everything the Simulator borrows
// (scenario, prepared run, workload, policy, engine, selector), built in that order, with the
// Simulator last. Throws as LoadScenarioFile and PrepareRun do.
class SteppedRun {
 public:
  SteppedRun(const std::string& scenario_path, const std::vector<std::string>& overrides);
  SteppedRun(const SteppedRun&) = delete;
  SteppedRun& operator=(const SteppedRun&) = delete;

  [[nodiscard]] const Scenario& scenario() const { return scenario_; }
  [[nodiscard]] const PreparedRun& prepared() const { return prepared_; }
  [[nodiscard]] const Workload& workload() const { return workload_; }
  [[nodiscard]] Engine& engine() { return *engine_; }
  [[nodiscard]] Simulator& simulator() { return *simulator_; }

 private:
  Scenario scenario_;
  PreparedRun prepared_;
  Workload workload_;
  std::unique_ptr<StopPolicy> policy_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<CandidateSelector> selector_;
  std::unique_ptr<Simulator> simulator_;
};

// What summary.json records about the resolved run beyond the scenario: the KV pool, the model
// and profile that were used.
[[nodiscard]] nlohmann::ordered_json ResolvedRunJson(const PreparedRun& prepared);

}  // namespace feather
