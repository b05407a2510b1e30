// half.cc: fp16 conversions (see half.h).
#include "hw/cuda/half.h"

#include <cmath>
#include <cstring>

namespace feather::hw::cuda {

float HalfToFloat(uint16_t bits) {
  const uint32_t sign = (bits >> 15) & 1u;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);  // subnormal (or zero)
  } else if (exponent == 31) {
    magnitude = mantissa == 0 ? HUGE_VALF : NAN;
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
  }
  return sign != 0 ? -magnitude : magnitude;
}

uint16_t FloatToHalf(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof word);
  const auto sign = static_cast<uint16_t>((word >> 16) & 0x8000u);
  const float magnitude = std::fabs(value);
  if (std::isnan(value)) return static_cast<uint16_t>(sign | 0x7e00u);
  if (magnitude >= 65520.0F) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (magnitude < 0x1.0p-14F) {  // subnormal: a multiple of 2^-24, rounded to nearest even
    const float scaled = magnitude * 0x1.0p24F;
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(scaled)));
  }
  const uint32_t abs_word = word & 0x7fffffffu;
  const uint32_t exponent = (abs_word >> 23) - 127 + 15;
  uint32_t mantissa = abs_word & 0x7fffffu;
  uint32_t half = (exponent << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u) != 0)) ++half;  // carries into exponent
  return static_cast<uint16_t>(sign | half);
}

}  // namespace feather::hw::cuda
