// synthetic_prompts.h: token sequences with a controlled prefix-sharing structure.
//
// Benchmarks, tests and (later) workload generators need prompts whose sharing is known exactly:
// N groups with a common prefix and unique suffixes, or a radix tree of L levels with B branches
// per level (the paper's Experiment 4 shapes). Every tree node owns its own random token
// segment, so two prompts share exactly the segments of their common tree path. All prompts of a
// set live in one flat token array (no per-prompt allocation).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/types.h"

namespace feather {

struct PromptSet {
  std::vector<Token> tokens;      // all prompts, back to back
  std::vector<uint64_t> offsets;  // prompt i is tokens[offsets[i], offsets[i+1])
  std::vector<uint32_t> group;    // prompt i's leaf in the sharing tree (its Oracle prefix group)

  [[nodiscard]] size_t size() const { return group.size(); }
  [[nodiscard]] std::span<const Token> Prompt(size_t i) const {
    return {tokens.data() + offsets[i], tokens.data() + offsets[i + 1]};
  }
};

struct RadixShape {
  uint32_t levels = 1;                  // tree depth, >= 1
  uint32_t branching = 1;               // children per internal node, >= 1
  uint32_t tokens_per_level = 1000;     // length of every tree segment
  uint32_t unique_suffix_tokens = 100;  // per-prompt random tail after the tree path
};

// `count` prompts, each a uniformly random root-to-leaf path of `shape` followed by a unique
// suffix. group = the leaf index in [0, branching^levels).
[[nodiscard]] PromptSet MakeRadixPrompts(const RadixShape& shape, uint32_t count, uint64_t seed);

// `count` prompts in `groups` groups (assigned round-robin, so group sizes differ by at most one):
// a shared prefix of `prefix_tokens` per group, then `suffix_tokens` unique tokens.
[[nodiscard]] PromptSet MakeGroupedPrompts(uint32_t count, uint32_t groups, uint32_t prefix_tokens,
                                           uint32_t suffix_tokens, uint64_t seed);

}  // namespace feather
