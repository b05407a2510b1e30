// interleaved_passes.h: measuring a set of engine steps so that slow drift of the machine's
// speed does not masquerade as a difference between steps.
//
// On a shared VM the speed of identical work drifts by 10-20 % over minutes (another tenant, a
// frequency change). Timing one step R times in a row and moving on gives every step its own
// drift state: the same GEMM shape measured 8 ms at one point of a calibration and 14 ms at
// another. RunInterleavedPasses instead runs one warm-up pass over all steps, then R passes, the
// direction alternating so that a linear drift cancels in each step's median; every step then
// sees the same mix of machine states, and comparisons between steps (cascade on vs off, one
// group vs twenty) are made at nearly the same moment. Used by `feather calibrate` and
// `feather bench experiments`; engine-agnostic, so the GPU target can use it too.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "sim/engine/engine.h"

namespace feather::hw {

// execute(i, pass) runs step i once and returns its timing; pass 0 is the warm-up, whose
// timing is dropped. after_pass(pass), when set, is called after each pass (progress,
// interruption checks). Returns timings[i], the R timings of step i in pass order.
// Precondition: repetitions ≥ 1.
[[nodiscard]] std::vector<std::vector<StepTiming>> RunInterleavedPasses(
    size_t steps, int repetitions, const std::function<StepTiming(size_t step, int pass)>& execute,
    const std::function<void(int pass)>& after_pass = {});

// The timing whose total is the median of `timings` (the upper median for an even count), whole,
// so its terms stay consistent with its total. Precondition: not empty.
[[nodiscard]] StepTiming MedianByTotal(std::vector<StepTiming> timings);

// (max − min) / median of the totals: the spread of one step's repetitions. 0 for one timing.
[[nodiscard]] double RelativeSpread(const std::vector<StepTiming>& timings);

}  // namespace feather::hw
