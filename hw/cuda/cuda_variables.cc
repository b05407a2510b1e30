// cuda_variables.cc: the FEATHER_CUDA_* variables (see cuda_variables.h).
#include "hw/cuda/cuda_variables.h"

#include <cstddef>
#include <string>
#include <string_view>

#include "hw/isa_variable.h"

namespace feather::hw::cuda {
namespace {

// Every value is available on every GPU the target builds for.
std::string_view NothingMissing(size_t) { return {}; }

}  // namespace

bool DecodeKernelFromEnvironment() {
  static const bool decode = [] {
    constexpr std::string_view kNames[] = {"auto", "general"};
    return ChoiceFromVariable("FEATHER_CUDA_ATTENTION", kNames, 0, NothingMissing) == 0;
  }();
  return decode;
}

bool Bf16WeightsFromEnvironment() {
  static const bool bf16 = [] {
    constexpr std::string_view kNames[] = {"fp32", "bf16"};
    return ChoiceFromVariable("FEATHER_CUDA_WEIGHTS", kNames, 0, NothingMissing) == 1;
  }();
  return bf16;
}

std::string CudaKernelChoices() {
  return std::string("weights ") + (Bf16WeightsFromEnvironment() ? "bf16" : "fp32") +
         ", attention " + (DecodeKernelFromEnvironment() ? "auto" : "general");
}

}  // namespace feather::hw::cuda
