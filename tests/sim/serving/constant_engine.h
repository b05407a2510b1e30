// constant_engine.h: a test engine whose step time is fixed + per request + per new token,
// shared by the simulator's vLLM and SGLang tests. It checks that every request's block table
// covers its tokens and remembers the largest batch-wide common prefix it saw.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string_view>

#include "sim/engine/engine.h"

namespace feather {

// Step time = fixed + per_request × requests + per_token × new tokens; remembers the plans.
class ConstantEngine final : public Engine {
 public:
  std::string_view Name() const override { return "constant"; }
  StepTiming Execute(const BatchPlan& plan) override {
    StepTiming t;
    t.term_ns[static_cast<size_t>(StepTerm::kOverhead)] =
        1'000'000 + 10'000 * static_cast<int64_t>(plan.num_requests()) +
        100 * static_cast<int64_t>(plan.total_new_tokens());
    t.total_ns = t.term(StepTerm::kOverhead);
    if (plan.num_requests() >= 2) {  // one request alone shares its whole table with itself
      max_common_prefix = std::max(max_common_prefix, plan.common_prefix_tokens);
    }
    for (const StepRequest& r : plan.requests) {
      EXPECT_GE(r.block_table.size() * plan.block_tokens, r.context_tokens + r.new_tokens);
    }
    return t;
  }
  uint32_t max_common_prefix = 0;
};

}  // namespace feather
