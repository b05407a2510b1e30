// cascade_rule.h: vLLM v1's thresholds for cascade attention (vllm/v1/attention/backends/
// flash_attn.py, use_cascade_attention): a decode step reads a prefix shared by all its requests
// once only when that prefix holds at least kCascadeMinPrefixTokens tokens and the step at least
// kCascadeMinRequests requests. One place for the rule: the model engine prices steps with it
// (sim/engine/model_engine.h) and the stop policies' state reads it (policies/policy_state.h).
#pragma once

#include <cstdint>

namespace feather {

inline constexpr uint32_t kCascadeMinPrefixTokens = 256;
inline constexpr uint32_t kCascadeMinRequests = 8;

}  // namespace feather
