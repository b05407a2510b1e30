// isa_variable.cc: see isa_variable.h.
#include "hw/isa_variable.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace feather::hw {

size_t ChoiceFromVariable(const char* variable, std::span<const std::string_view> names,
                          size_t unset, const std::function<std::string_view(size_t)>& missing) {
  const char* value = std::getenv(variable);
  if (value == nullptr || *value == '\0') return unset;
  std::string all, supported;
  for (size_t i = 0; i < names.size(); ++i) {
    all += (i == 0 ? "" : ", ") + std::string(names[i]);
    if (missing(i).empty()) supported += (supported.empty() ? "" : ", ") + std::string(names[i]);
  }
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] != value) continue;
    const std::string_view lacks = missing(i);
    if (lacks.empty()) return i;
    std::fprintf(stderr, "error: %s=%s: this CPU lacks %.*s (this CPU runs: %s)\n", variable, value,
                 static_cast<int>(lacks.size()), lacks.data(), supported.c_str());
    std::exit(2);
  }
  std::fprintf(stderr, "error: %s=%s: unknown (one of %s)\n", variable, value, all.c_str());
  std::exit(2);
}

}  // namespace feather::hw
