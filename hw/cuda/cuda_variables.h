// cuda_variables.h: the environment variables that choose between the CUDA target's kernels, read
// once per process with the shared reader of hw/isa_variable.h (an unknown value is bad input: one
// line on stderr naming the variable, the value and the names it takes, exit status 2). Host code,
// built with or without CUDA, so that the CPU tests cover the parsing.
//
//   FEATHER_CUDA_ATTENTION  auto (or unset): the decode kernel where it applies; general: the
//                           general kernel for every plan (hw/cuda/attention_kernels.h)
//   FEATHER_CUDA_WEIGHTS    fp32 (or unset): fp32 weights, cuBLAS sgemm; bf16: bf16 weight
//                           matrices, cuBLASLt (CudaBackendOptions::bf16_weights)
#pragma once

#include <string>

namespace feather::hw::cuda {

[[nodiscard]] bool DecodeKernelFromEnvironment();
[[nodiscard]] bool Bf16WeightsFromEnvironment();

// "weights fp32|bf16, attention auto|general": the choices the two variables make, for the
// provenance a measurement prints and records (calibrate's kernel_variant, bench experiments).
[[nodiscard]] std::string CudaKernelChoices();

}  // namespace feather::hw::cuda
