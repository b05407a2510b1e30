// cht_test_support.h: random radix-shaped prompt workloads for the CHT tests.
//
// A random tree of 1-4 levels with 1-8 branches per level whose segments are 0.5-3 chunks long;
// each prompt is a random path, often with a unique tail, sometimes truncated mid-chunk, and
// sometimes an exact duplicate of an earlier prompt. Small sizes keep 10,000 sequences fast.
#pragma once

#include <cstdint>
#include <vector>

#include "base/types.h"
#include "base/rng.h"

namespace feather::testing {

class RadixPromptSource {
 public:
  RadixPromptSource(uint64_t seed, uint32_t chunk_tokens) : rng_(seed), chunk_(chunk_tokens) {
    levels_ = static_cast<uint32_t>(rng_.UniformInt(1, 4));
    branching_ = static_cast<uint32_t>(rng_.UniformInt(1, 8));
    uint64_t nodes = 1;
    for (uint32_t l = 0; l < levels_; ++l) {
      nodes *= branching_;
      std::vector<std::vector<Token>> level;
      for (uint64_t n = 0; n < nodes; ++n) level.push_back(RandomTokens(SegmentLength()));
      segments_.push_back(std::move(level));
    }
  }

  std::vector<Token> Next() {
    if (!issued_.empty() && rng_.Uniform(10) == 0) return issued_[rng_.Uniform(issued_.size())];
    std::vector<Token> prompt;
    uint64_t index = 0;
    const uint32_t depth = static_cast<uint32_t>(rng_.UniformInt(1, levels_));
    for (uint32_t l = 0; l < depth; ++l) {
      index = index * branching_ + rng_.Uniform(branching_);
      const auto& seg = segments_[l][index];
      prompt.insert(prompt.end(), seg.begin(), seg.end());
    }
    if (rng_.Uniform(3) != 0) {
      const auto tail = RandomTokens(static_cast<uint32_t>(rng_.UniformInt(1, 2 * chunk_)));
      prompt.insert(prompt.end(), tail.begin(), tail.end());
    }
    if (rng_.Uniform(4) == 0 && !prompt.empty()) {
      prompt.resize(static_cast<size_t>(rng_.UniformInt(1, static_cast<int64_t>(prompt.size()))));
    }
    issued_.push_back(prompt);
    return prompt;
  }

  Rng& rng() { return rng_; }

 private:
  uint32_t SegmentLength() {
    return static_cast<uint32_t>(rng_.UniformInt(chunk_ / 2 + 1, 3 * chunk_));
  }
  std::vector<Token> RandomTokens(uint32_t count) {
    std::vector<Token> out(count);
    // A small alphabet makes accidental partial matches inside segments common.
    for (Token& t : out) t = static_cast<Token>(rng_.Uniform(4));
    return out;
  }

  Rng rng_;
  uint32_t chunk_;
  uint32_t levels_ = 1;
  uint32_t branching_ = 1;
  std::vector<std::vector<std::vector<Token>>> segments_;
  std::vector<std::vector<Token>> issued_;
};

}  // namespace feather::testing
