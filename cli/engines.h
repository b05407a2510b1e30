// engines.h: registers the real engines this build has with the scenario engine registry
// (sim/io/scenario_run.h), so a scenario's `engine: cpu` runs on hw::CpuEngine.
//
// sim/ must not link hw/; the program registers factories at startup instead. Call
// RegisterBuiltinEngines() before preparing a run; it is idempotent and thread-safe (O(1) after
// the first call).
#pragma once

namespace feather {

// "cpu": hw::CpuEngine over the prepared run's model, with serving.kv_cache_blocks blocks of
// serving.block_tokens tokens and serving.cascade_attention, and the kernels' prefetch lookahead
// the profile was calibrated with (measured_on.decode_prefetch_bytes, when recorded); "cuda"
// (builds with CUDA only):
// hw::cuda::CudaEngine the same way, failing with the one-line reason without a GPU.
void RegisterBuiltinEngines();

}  // namespace feather
