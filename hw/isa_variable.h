// isa_variable.h: the one reading of a FEATHER_*_ISA environment variable, shared by the run-time
// kernel choices of hw/ (the attention tile step, attention_internal.h; the Eigen GEMM build,
// gemm.h; FEATHER_GEMM_SKINNY, the skinny GEMM kernel, and FEATHER_GEMM_PACKED, the engine's
// packed weights, gemm.h). Not a public API.
//
// Each choice is a small enum whose values index a list of names ("auto" first). The variable
// may name one of them; an unknown name, or one this CPU cannot run, is bad input: one line on
// stderr naming the variable, the value, what is wrong and the names this CPU can run, then exit
// status 2. Called once per process per variable (its callers keep the answer).
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string_view>

namespace feather::hw {

// The index in `names` of the name `variable` holds, or `unset` when it is unset or empty.
// missing(i): "" when this CPU can run choice i, else the feature it lacks (e.g. "avx512vl").
[[nodiscard]] size_t ChoiceFromVariable(const char* variable,
                                        std::span<const std::string_view> names, size_t unset,
                                        const std::function<std::string_view(size_t)>& missing);

}  // namespace feather::hw
