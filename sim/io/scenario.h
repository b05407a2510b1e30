// scenario.h: a scenario file (YAML) resolved into the plain structs a run needs, with every
// problem of the file reported at once (file:line: key: message, exit code 2 in the CLI).
//
// The schema is documented in scenarios/README.md. Loading order: parse the YAML, apply the
// command line's `--set key=value` overrides (the value is parsed as YAML, so numbers, booleans,
// lists and maps all work), then validate: unknown keys, wrong types and out-of-range values are
// problems; absent keys take the defaults of the structs below. Relative paths inside a file are
// resolved against the file's directory; paths given with --set against the working directory.
// `model` and `profile` also accept the short names of the built-in files (embedded_files.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "policies/selector_factory.h"
#include "policies/stop_policy_factory.h"
#include "sim/serving/serving_config.h"
#include "sim/workload/workload.h"

namespace feather {

struct Scenario {
  std::string name = "unnamed";
  std::string source;  // the file it came from ("<built-in>/scenarios/default.yaml" if embedded)
  uint64_t seed = 1;
  WorkloadSpec workload;

  std::string selector = "cht";
  SelectorOptions selector_options;
  // converge: the best general policy of the policy suite (README.md, "Default stop policy").
  std::string stop = "converge";
  StopPolicyOptions stop_options;
  std::string policy_load;  // saved policy to start from ("" = fresh)
  bool policy_learning = true;

  ServingConfig serving;
  std::string engine = "model";          // model | cpu | cuda
  std::string model = "llama-3-8b";      // built-in name or resolved path
  std::string profile = "rtx6000-ada";   // built-in name or resolved path
  // `scheduler_engine_cost`: the engine cost table `scheduler_time: engine` charges from
  // (sim/serving/engine_cost.h); built-in name (results/engine-cost/<name>.yaml) or resolved path.
  std::string engine_cost = "amd-epyc-vm";
  // `step_noise: {enabled, seed}`: seeded step-time noise on the model engine, drawn from the
  // profile's measured spread (sim/engine/step_noise.h). Off by default; `feather validate
  // --repeat N` turns it on for its model runs.
  struct StepNoiseKey {
    bool enabled = false;
    uint64_t seed = 1;
  } step_noise;
};

// `overrides` are "key=value" strings from --set. Throws InputError.
[[nodiscard]] Scenario LoadScenarioFile(const std::string& path,
                                        std::span<const std::string> overrides = {});
// Same, from text (the embedded default scenario, tests). `display_name` is used in messages;
// `base_dir` resolves relative paths in the text.
[[nodiscard]] Scenario LoadScenarioText(std::string_view text, const std::string& display_name,
                                        const std::string& base_dir,
                                        std::span<const std::string> overrides = {});

// The resolved scenario, every field with its effective value (echoed into summary.json).
[[nodiscard]] nlohmann::ordered_json ScenarioToJson(const Scenario& scenario);

// Text of a built-in file or a file on disk: `name_or_path` is a short name (looked up as
// `<embedded_dir>/<name>.yaml` among the embedded files) or a path. Throws InputError naming
// `key` when neither exists. Returns {text, display name}.
struct ResolvedText {
  std::string text;
  std::string display_name;
};
[[nodiscard]] ResolvedText ReadNamedFile(const std::string& name_or_path,
                                         std::string_view embedded_dir, std::string_view key);
// A scenario's `profile`: as ReadNamedFile, except that a short name is looked up on disk first,
// as results/profiles/<name>.yaml under the working directory, so a profile recalibrated in
// place (`feather calibrate --out results/profiles/cpu.yaml`) wins over the copy built into the
// binary. The display name says which was read ("results/profiles/cpu.yaml" or
// "<built-in>/results/profiles/cpu.yaml"); summary.json echoes it as resolved.profile_file.
[[nodiscard]] ResolvedText ReadProfileFile(const std::string& name_or_path);

}  // namespace feather
