// prompt_store.h: a workload's prompts stored once per distinct prefix, and their block-hash
// chains stored the same way.
//
// PromptStore. Every prompt is a shared head followed by the request's own tail (the two-piece
// PromptView of base/prompt_view.h). Heads live in the store once per distinct prefix: a
// sharing group's prefix, a radix leaf's root-to-leaf path, the fractional workload's common
// segment (each prompt's head is a prefix of it), a trace's run of stored blocks. Tails are
// each request's own tokens. So the store holds the unique tokens of a workload, not the total:
// the default scenario at 20,000 requests holds 5 x 5,000 + 20,000 x ~100 tokens (8 MB), where a
// contiguous copy per prompt held 102 M tokens (410 MB). What stays per request is 24 bytes
// (where its head and tail are) plus its own tokens.
//
// How the workload generator uses it (workload.cc): AppendTokens(n) reserves n tokens at the
// end and returns their offset; the generator writes them through MutableTokens(); AddPrompt
// records a prompt as (head, tail) pieces of the store. Offsets, not pointers, so the store may
// grow while it is built; views handed out afterwards stay valid as long as the store lives and
// is not appended to.
//
// PromptChains. The simulator's KV cache and the block-table selector identify a full block of
// prompt tokens by its chained hash (policies/block_hash_table.h), so every request needs its
// chain. A head's full blocks hash the same for every request with that head: PromptChains
// computes them once per distinct head (memoised by the head's offset, keeping the longest chain
// computed from it: a shorter head at the same offset is a prefix of the same stored tokens, so
// its chain is a prefix of that chain) and stores them once; a request's own hashes continue
// the chain from the head's last full block (the block that straddles head and tail, and the
// tail's blocks). ChainOf(i) returns both as one ChainView. The default scenario at 20K: 1,560
// shared hashes and ~7 own per request (1 MB), where per-request chains held 6.3 M (51 MB).
//
// Limit (traces). A head is one contiguous run, so a trace record shares only the leading blocks
// stored back to back somewhere (workload.cc); blocks after the first gap are copied into its
// tail. Conversations interleave in the Mooncake trace, so a later turn finds its system-prompt
// block contiguous with the earlier turn's blocks only rarely: on the full conversation trace
// (12,031 records) the store holds 138.6 M tokens of 144.8 M in total, where the distinct
// blocks are 93.6 M. Getting to the distinct blocks needs a prompt of several pieces (a list of
// block runs) or an occasional contiguous re-placement of a conversation; left open.
//
// Complexity: Prompt, ChainOf O(1); AddPrompt O(1) amortized; building PromptChains O(unique
// head tokens + Σ own tokens) hashing (each distinct head hashed once, each tail once).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/prompt_view.h"
#include "base/types.h"
#include "sim/workload/synthetic_prompts.h"

namespace feather {

class PromptStore {
 public:
  // A run of stored tokens: [offset, offset + tokens).
  struct Piece {
    uint64_t offset = 0;
    uint32_t tokens = 0;
  };

  // Oracle prefix group of each prompt (workload.h says what it means per sharing kind).
  std::vector<uint32_t> group;

  [[nodiscard]] size_t size() const { return entries_.size(); }
  [[nodiscard]] PromptView Prompt(size_t i) const {
    const Entry& e = entries_[i];
    const Token* base = tokens_.data();
    // Head key: where the head starts, + 1 (heads at one offset are prefixes of the same
    // stored tokens; readers key on it with the head's length).
    return PromptView({base + e.head_offset, e.head_tokens}, {base + e.tail_offset, e.tail_tokens},
                      e.head_offset + 1);
  }
  [[nodiscard]] Piece Head(size_t i) const {
    return {entries_[i].head_offset, entries_[i].head_tokens};
  }
  [[nodiscard]] Piece Tail(size_t i) const {
    return {entries_[i].tail_offset, entries_[i].tail_tokens};
  }

  // Tokens stored (shared heads once, tails): what the store's memory follows.
  [[nodiscard]] uint64_t StoredTokens() const { return tokens_.size(); }
  // Σ prompt sizes: what a contiguous copy per prompt would store.
  [[nodiscard]] uint64_t TotalTokens() const { return total_tokens_; }
  [[nodiscard]] size_t MemoryBytes() const {
    return tokens_.capacity() * sizeof(Token) + entries_.capacity() * sizeof(Entry) +
           group.capacity() * sizeof(uint32_t);
  }

  // --- Building ---
  void Reserve(size_t prompts, uint64_t stored_tokens);
  // Appends `count` tokens (zero-initialised) and returns the offset of the first.
  uint64_t AppendTokens(uint64_t count);
  // Writable tokens from `offset` on (valid until the next AppendTokens).
  [[nodiscard]] Token* MutableTokens(uint64_t offset) { return tokens_.data() + offset; }
  [[nodiscard]] const Token* Tokens(uint64_t offset) const { return tokens_.data() + offset; }
  // Adds prompt size(): `head` then `tail`, both pieces already written. Either may be empty.
  void AddPrompt(Piece head, Piece tail, uint32_t prompt_group);

 private:
  struct Entry {
    uint64_t head_offset = 0;
    uint64_t tail_offset = 0;
    uint32_t head_tokens = 0;
    uint32_t tail_tokens = 0;
  };
  std::vector<Token> tokens_;
  std::vector<Entry> entries_;
  uint64_t total_tokens_ = 0;
};

class PromptChains {
 public:
  PromptChains() = default;
  // The chains of every prompt of `store` over blocks of `block_tokens` tokens, seeded as
  // BlockHashTable's (BlockHashConfig::seed): ChainOf(i) equals
  // BlockHashTable({block_tokens}).ComputeChain(store.Prompt(i)) hash for hash.
  PromptChains(const PromptStore& store, uint32_t block_tokens);

  [[nodiscard]] size_t size() const { return entries_.size(); }
  [[nodiscard]] ChainView ChainOf(size_t i) const {
    const Entry& e = entries_[i];
    const PrefixHash* base = hashes_.data();
    return ChainView({base + e.head_offset, e.head_blocks}, {base + e.tail_offset, e.tail_blocks});
  }
  // Hashes stored (shared heads' once, own).
  [[nodiscard]] uint64_t StoredHashes() const { return hashes_.size(); }
  [[nodiscard]] size_t MemoryBytes() const {
    return hashes_.capacity() * sizeof(PrefixHash) + entries_.capacity() * sizeof(Entry);
  }

 private:
  struct Entry {
    uint64_t head_offset = 0;
    uint64_t tail_offset = 0;
    uint32_t head_blocks = 0;
    uint32_t tail_blocks = 0;
  };
  std::vector<PrefixHash> hashes_;
  std::vector<Entry> entries_;
};

// Conversions to and from PromptSet (synthetic_prompts.h: every prompt stored whole, back to
// back): the naive per-request copy, for tests that compare against it and for callers that
// need one contiguous prompt each; and a store of whole prompts (each its own tail, nothing
// shared), for tests and benchmarks that build a Workload from a PromptSet. O(total tokens).
[[nodiscard]] PromptSet CopyEachPrompt(const PromptStore& store);
[[nodiscard]] PromptStore StoreEachPrompt(const PromptSet& set);

}  // namespace feather
