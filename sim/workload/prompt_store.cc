// prompt_store.cc: the prompt store and its deduplicated block-hash chains (see the header).
#include "sim/workload/prompt_store.h"

#include <algorithm>

#include "base/check.h"
#include "base/flat_hash_map.h"
#include "policies/block_hash_table.h"

namespace feather {

void PromptStore::Reserve(size_t prompts, uint64_t stored_tokens) {
  entries_.reserve(prompts);
  group.reserve(prompts);
  tokens_.reserve(stored_tokens);
}

uint64_t PromptStore::AppendTokens(uint64_t count) {
  const uint64_t offset = tokens_.size();
  tokens_.resize(offset + count);
  return offset;
}

void PromptStore::AddPrompt(Piece head, Piece tail, uint32_t prompt_group) {
  FEATHER_CHECK(
      head.offset + head.tokens <= tokens_.size() && tail.offset + tail.tokens <= tokens_.size(),
      "prompt piece outside the store");
  entries_.push_back(Entry{head.offset, tail.offset, head.tokens, tail.tokens});
  group.push_back(prompt_group);
  total_tokens_ += uint64_t{head.tokens} + tail.tokens;
}

PromptChains::PromptChains(const PromptStore& store, uint32_t block_tokens) {
  FEATHER_CHECK(block_tokens > 0, "block_tokens must be positive");
  const PrefixHash seed = BlockHashConfig{}.seed;
  const size_t n = store.size();
  entries_.resize(n);
  // Longest chain computed so far from a head at each offset: where its hashes start, how many.
  struct Memo {
    uint64_t hash_offset = 0;
    uint32_t blocks = 0;
  };
  FlatHashMap<uint64_t, Memo> by_head;
  uint64_t most_hashes = 0;  // every chain whole: an upper bound, so hashes_ never reallocates
  for (size_t i = 0; i < n; ++i) most_hashes += store.Prompt(i).size() / block_tokens;
  hashes_.reserve(most_hashes);
  for (size_t i = 0; i < n; ++i) {
    const PromptView prompt = store.Prompt(i);
    const PromptStore::Piece head = store.Head(i);
    const uint32_t head_blocks = head.tokens / block_tokens;
    Entry& e = entries_[i];
    e.head_blocks = head_blocks;
    if (head_blocks > 0) {
      Memo& memo = *by_head.Insert(head.offset, Memo{}).first;
      if (memo.blocks < head_blocks) {  // first use of this head, or a longer one
        memo.hash_offset = hashes_.size();
        memo.blocks = head_blocks;
        BlockHashTable::ExtendChain(
            seed, PromptView({store.Tokens(head.offset), size_t{head_blocks} * block_tokens}),
            block_tokens, hashes_);
      }
      e.head_offset = memo.hash_offset;
    }
    // The rest continues from the head's last full block.
    const PrefixHash parent = head_blocks > 0 ? hashes_[e.head_offset + head_blocks - 1] : seed;
    const size_t done = size_t{head_blocks} * block_tokens;
    e.tail_offset = hashes_.size();
    e.tail_blocks = static_cast<uint32_t>(BlockHashTable::ExtendChain(
        parent, prompt.subview(done, prompt.size() - done), block_tokens, hashes_));
  }
}

PromptSet CopyEachPrompt(const PromptStore& store) {
  PromptSet set;
  set.tokens.resize(store.TotalTokens());
  set.offsets.reserve(store.size() + 1);
  set.offsets.push_back(0);
  for (size_t i = 0; i < store.size(); ++i) {
    const PromptView prompt = store.Prompt(i);
    prompt.CopyTo(set.tokens.data() + set.offsets.back());
    set.offsets.push_back(set.offsets.back() + prompt.size());
  }
  set.group = store.group;
  return set;
}

PromptStore StoreEachPrompt(const PromptSet& set) {
  PromptStore store;
  store.Reserve(set.size(), set.tokens.size());
  const uint64_t at = store.AppendTokens(set.tokens.size());
  std::copy(set.tokens.begin(), set.tokens.end(), store.MutableTokens(at));
  for (size_t i = 0; i < set.size(); ++i) {
    const auto tokens = static_cast<uint32_t>(set.offsets[i + 1] - set.offsets[i]);
    store.AddPrompt({}, {at + set.offsets[i], tokens}, set.group[i]);
  }
  return store;
}

}  // namespace feather
