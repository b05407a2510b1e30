// stop_policy_test_support.h: builders shared by the stop-policy tests: a CHT prefix signal and
// a step whose reward is an exact number of decode tokens per second.
#pragma once

#include <cstdint>

#include "policies/selector.h"
#include "policies/stop_policy.h"

namespace feather::test {

inline PrefixSignal Signal(uint32_t before, uint32_t after, uint32_t peers) {
  PrefixSignal s;
  s.tip_before_chunks = before;
  s.tip_after_chunks = after;
  s.peers = peers;
  s.chunk_tokens = 50;
  return s;
}

// A step whose reward (decode tokens per second) is exactly `tokens_per_s`.
inline StepFeedback Reward(uint32_t tokens_per_s) {
  StepFeedback f;
  f.batch_size = tokens_per_s;
  f.decode_tokens = tokens_per_s;
  f.step_ns = 1'000'000'000;
  return f;
}

}  // namespace feather::test
