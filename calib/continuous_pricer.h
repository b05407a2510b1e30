// continuous_pricer.h: StepPricer's formulas without the rounding to whole nanoseconds.
//
// The calibration fit differentiates the cost model numerically; StepPricer rounds every term to
// an integer number of ns, which makes small parameter steps invisible. ContinuousPricer
// evaluates the same formulas (sim/model_engine.h) in double precision: each term equals
// StepPricer::Price(shape).term_ns within 0.5 ns (a test checks it). Construction is a few
// divisions; Terms is O(1) with one pow.
#pragma once

#include <array>

#include "sim/device_profile.h"
#include "sim/engine.h"
#include "sim/model_config.h"
#include "sim/model_engine.h"

namespace feather::calib {

class ContinuousPricer {
 public:
  ContinuousPricer(const DeviceProfile& profile, const ModelConfig& model);
  // Unrounded term_ns, indexed by StepTerm.
  [[nodiscard]] std::array<double, kNumStepTerms> Terms(const StepShape& shape) const;

 private:
  double weight_stream_ns_ = 0;
  double linear_ns_per_token_ = 0;
  double gemm_batched_fixed_ns_ = 0;
  double lm_head_ns_per_token_ = 0;
  double dram_ns_per_kv_token_ = 0;
  double l2_ns_per_kv_token_ = 0;
  double attn_ns_per_pair_ = 0;
  double reuse_window_requests_ = 1;
  double reuse_hit_max_ = 0;
  double cascade_fixed_ns_ = 0;
  double cascade_ns_per_request_ = 0;
  double overhead_fixed_ns_ = 0;
  double per_request_ns_ = 0;
};

}  // namespace feather::calib
