// engines.cc: RegisterBuiltinEngines (see engines.h).
#include "cli/engines.h"

#include <memory>
#include <mutex>

#include "hw/cpu_engine.h"
#include "hw/gemm.h"
#include "sim/io/scenario_run.h"
#if FEATHER_HAVE_CUDA
#include <stdexcept>
#include <string>

#include "hw/cuda/cuda_engine.h"
#include "hw/cuda/device.h"
#endif

namespace feather {

void RegisterBuiltinEngines() {
  static std::once_flag once;
  std::call_once(once, [] {
    RegisterEngine("cpu", [](const PreparedRun& prepared) -> std::unique_ptr<Engine> {
      hw::CpuEngineOptions options;
      options.cascade_attention = prepared.serving.cascade_attention;
      // Eigen, not OpenBLAS, inside the engine: OpenBLAS's pthread workers and the attention
      // kernels' OpenMP workers each spin between calls on the same cores, and a step alternates
      // between them dozens of times. On the 2-core reference host (cpu-small, 1,000-token
      // contexts, tests/hw/cpu_engine_benchmark.cc) OpenBLAS made decode steps 1.5–3.4× slower
      // (B = 1: 34 vs 10 ms; B = 8: 111 vs 33 ms), although alone it is as fast as Eigen.
      options.gemm_backend = hw::GemmBackend::kEigen;
      options = hw::WithProfileKernels(options, prepared.profile);
      return std::make_unique<hw::CpuEngine>(prepared.model, prepared.serving.kv_cache_blocks,
                                             prepared.serving.block_tokens, options);
    });
#if FEATHER_HAVE_CUDA
    // "cuda": hw::cuda::CudaEngine, in builds with CUDA only (without, the registry's "not
    // available in this build" answers). Without a device: the one-line reason.
    RegisterEngine("cuda", [](const PreparedRun& prepared) -> std::unique_ptr<Engine> {
      const hw::cuda::CudaDeviceInfo device = hw::cuda::QueryCudaDevice();
      if (!device.available) throw std::runtime_error("engine 'cuda': " + device.why_not);
      hw::cuda::CudaEngineOptions options;
      options.cascade_attention = prepared.serving.cascade_attention;
      return std::make_unique<hw::cuda::CudaEngine>(prepared.model,
                                                    prepared.serving.kv_cache_blocks,
                                                    prepared.serving.block_tokens, options);
    });
#endif
  });
}

}  // namespace feather
