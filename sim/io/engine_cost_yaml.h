// engine_cost_yaml.h: reading an engine scheduling cost table (sim/serving/engine_cost.h) from
// YAML (schema: results/engine-cost/README.md; written by scripts/engine-cost.sh). I/O edge.
#pragma once

#include <string>
#include <string_view>

#include "sim/serving/engine_cost.h"

namespace feather {

// Parses a cost table. `display_name` names the source in problems (a path, or
// "<built-in>/results/engine-cost/NAME.yaml"). Throws InputError naming file:line:key for every
// missing, mistyped, negative or unknown field at once.
[[nodiscard]] EngineCostTable ParseEngineCostTable(std::string_view yaml_text,
                                                   const std::string& display_name);

}  // namespace feather
