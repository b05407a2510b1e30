// engines.cc: RegisterBuiltinEngines (see engines.h).
#include "cli/engines.h"

#include <memory>
#include <mutex>

#include "hw/cpu_engine.h"
#include "sim/scenario_run.h"

namespace feather {

void RegisterBuiltinEngines() {
  static std::once_flag once;
  std::call_once(once, [] {
    RegisterEngine("cpu", [](const PreparedRun& prepared) -> std::unique_ptr<Engine> {
      hw::CpuEngineOptions options;
      options.cascade_attention = prepared.serving.cascade_attention;
      return std::make_unique<hw::CpuEngine>(prepared.model, prepared.serving.kv_cache_blocks,
                                             prepared.serving.block_tokens, options);
    });
  });
}

}  // namespace feather
