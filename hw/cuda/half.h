// half.h: IEEE fp16 <-> fp32 on the host, for the fp16 KV pools the CUDA kernels read (the
// emulation, the tests and the self-check fill and read them). Round to nearest even; NaN stays
// NaN; overflow goes to ±inf; subnormals are kept. O(1).
#pragma once

#include <cstdint>

namespace feather::hw::cuda {

[[nodiscard]] float HalfToFloat(uint16_t bits);
[[nodiscard]] uint16_t FloatToHalf(float value);

}  // namespace feather::hw::cuda
