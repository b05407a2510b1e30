// synthetic_prompts.cc: builds prompt sets with a known sharing tree (see the header).
#include "sim/workload/synthetic_prompts.h"

#include "base/rng.h"

namespace feather {
namespace {

// Random token ids in [1, 2^31): collisions between independent segments are negligible, so
// sharing happens only where the tree says so.
void AppendRandomTokens(Rng& rng, uint32_t count, std::vector<Token>& out) {
  for (uint32_t i = 0; i < count; ++i) {
    out.push_back(static_cast<Token>(1 + rng.Uniform(0x7ffffffeULL)));
  }
}

// Token segment of tree node (level, index): derived from its own seed so that it does not
// depend on which prompts were drawn before.
void AppendSegment(uint64_t seed, uint32_t level, uint64_t index, uint32_t count,
                   std::vector<Token>& out) {
  Rng rng(seed ^ (0x9e3779b97f4a7c15ULL * (uint64_t{level} + 1)) ^ (index * 0xda942042e4dd58b5ULL));
  AppendRandomTokens(rng, count, out);
}

}  // namespace

PromptSet MakeRadixPrompts(const RadixShape& shape, uint32_t count, uint64_t seed) {
  PromptSet set;
  const uint64_t per_prompt = uint64_t{shape.levels} * shape.tokens_per_level +
                              shape.unique_suffix_tokens;
  set.tokens.reserve(per_prompt * count);
  set.offsets.reserve(count + 1);
  set.group.reserve(count);
  set.offsets.push_back(0);
  Rng pick(seed);
  Rng suffix_rng(seed ^ 0x5bd1e995ULL);
  for (uint32_t i = 0; i < count; ++i) {
    uint64_t node = 0;  // index of the node at the current level among its level's nodes
    for (uint32_t level = 0; level < shape.levels; ++level) {
      node = node * shape.branching + pick.Uniform(shape.branching);
      AppendSegment(seed, level, node, shape.tokens_per_level, set.tokens);
    }
    AppendRandomTokens(suffix_rng, shape.unique_suffix_tokens, set.tokens);
    set.offsets.push_back(set.tokens.size());
    set.group.push_back(static_cast<uint32_t>(node));
  }
  return set;
}

PromptSet MakeGroupedPrompts(uint32_t count, uint32_t groups, uint32_t prefix_tokens,
                             uint32_t suffix_tokens, uint64_t seed) {
  PromptSet set;
  set.tokens.reserve((uint64_t{prefix_tokens} + suffix_tokens) * count);
  set.offsets.reserve(count + 1);
  set.group.reserve(count);
  set.offsets.push_back(0);
  Rng suffix_rng(seed ^ 0x5bd1e995ULL);
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t g = i % groups;
    AppendSegment(seed, 0, g, prefix_tokens, set.tokens);
    AppendRandomTokens(suffix_rng, suffix_tokens, set.tokens);
    set.offsets.push_back(set.tokens.size());
    set.group.push_back(g);
  }
  return set;
}

}  // namespace feather
