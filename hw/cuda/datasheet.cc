// datasheet.cc: the datasheet table and the probe check (see datasheet.h).
#include "hw/cuda/datasheet.h"

#include <array>
#include <cstdio>

namespace feather::hw::cuda {
namespace {

// Most specific names first (a "H100 PCIe" must not match the SXM row by "H100").
constexpr std::array<Datasheet, 10> kTable = {{
    {"H200", 4800, 989},
    {"H100 PCIe", 2000, 756},
    {"H100 NVL", 3900, 835},
    {"H100", 3350, 989},  // SXM5 (HBM3)
    {"A100-SXM4-80GB", 2039, 312},
    {"A100 80GB PCIe", 1935, 312},
    {"A100", 1555, 312},  // 40 GB
    {"L40S", 864, 362},
    {"L40", 864, 181},
    {"L4", 300, 121},
}};

}  // namespace

std::optional<Datasheet> FindDatasheet(const std::string& device_name) {
  for (const Datasheet& row : kTable) {
    if (device_name.find(row.name_contains) != std::string::npos) return row;
  }
  return std::nullopt;
}

std::string CheckAgainstDatasheet(const char* what, double measured, double datasheet,
                                  double floor) {
  const double ratio = datasheet > 0 ? measured / datasheet : 0;
  if (ratio >= floor && ratio <= kCeiling) return "";
  char line[256];
  std::snprintf(line, sizeof line,
                "%s %.1f is %.0f %% of the datasheet's %.1f (expected %.0f-%.0f %%)", what,
                measured, 100 * ratio, datasheet, 100 * floor, 100 * kCeiling);
  return line;
}

}  // namespace feather::hw::cuda
