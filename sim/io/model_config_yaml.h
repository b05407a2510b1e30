// model_config_yaml.h: reading model descriptions from YAML (schema: scenarios/models/README.md).
// The description itself is sim/engine/model_config.h; this is the I/O edge that knows yaml-cpp.
#pragma once

#include <string>
#include <string_view>

#include "sim/engine/model_config.h"

namespace feather {

// Parses a model description (schema: scenarios/models/README.md). `display_name` names the
// source in problems (a path, or "built-in:llama-3-8b"). Throws InputError naming file:line:key
// for every missing, mistyped, out-of-range or unknown field at once.
[[nodiscard]] ModelConfig ParseModelConfig(std::string_view yaml_text,
                                           const std::string& display_name);
// Reads and parses the file at `path`; an unreadable file is an InputError too.
[[nodiscard]] ModelConfig LoadModelConfig(const std::string& path);

}  // namespace feather
