// batch_shape.cc: see batch_shape.h.
#include "policies/batch_shape.h"

#include <algorithm>

namespace feather {

namespace {

// Leading positions, up to `limit`, where two block-hash chains agree (equal chain hashes name
// the same prefix).
size_t SharedLeadingBlocks(ChainView a, ChainView b, size_t limit) {
  limit = std::min({limit, a.size(), b.size()});
  size_t shared = 0;
  while (shared < limit && a[shared] == b[shared]) ++shared;
  return shared;
}

}  // namespace

void BatchShape::Clear() {
  kv_tokens_ = 0;
  prefix_tokens_ = kNoPrefix;
  front_ = kNoRequest;
  groups_ = {};
  for (auto& counts : counts_) counts.Clear();
}

bool BatchShape::GroupKey(ChainView chain, size_t depth, PrefixHash& key) const {
  const uint32_t blocks =
      (StopContext::kPrefixGroupDepths[depth] + block_tokens_ - 1) / block_tokens_;
  if (blocks == 0 || chain.size() < blocks) return false;
  key = chain[blocks - 1];
  return true;
}

void BatchShape::Add(RequestId id, uint32_t sequence_tokens, const Source& source) {
  kv_tokens_ += sequence_tokens;
  if (front_ == kNoRequest) front_ = id;
  const ChainView chain = source.ChainOf(id);
  for (size_t d = 0; d < kDepths; ++d) {
    PrefixHash key = 0;
    if (!GroupKey(chain, d, key)) return;  // deeper keys need a longer chain still
    Group& g = groups_[d];
    uint32_t& count = *counts_[d].Insert(key, 0).first;
    ++count;
    if (g.member != kNoRequest && key == g.key) {
      // One more member: the group's shared prefix can only shrink to what this one shares.
      const size_t shared =
          SharedLeadingBlocks(chain, source.ChainOf(g.member), g.prefix_tokens / block_tokens_);
      g.prefix_tokens = static_cast<uint32_t>(shared) * block_tokens_;
      g.requests = count;
    } else if (count > g.requests) {
      // A new largest group: its shared prefix from the blocks all its members hold.
      g.key = key;
      g.requests = count;
      g.member = id;
      g.prefix_tokens = source.HeldPrefixBlocks(id, count) * block_tokens_;
    }
  }
}

uint32_t BatchShape::SharedPrefixTokens(RequestId id, uint32_t cached_tokens,
                                        const Source& source) const {
  const ChainView own = source.ChainOf(id);
  if (prefix_tokens_ == kNoPrefix) {
    // The first request: the batch would share all its full blocks.
    return static_cast<uint32_t>(own.size()) * block_tokens_;
  }
  // Blocks the candidate would share physically: its cache hit, as far as it follows the front
  // request's chain.
  const size_t limit = std::min(prefix_tokens_, cached_tokens) / block_tokens_;
  return static_cast<uint32_t>(SharedLeadingBlocks(own, source.ChainOf(front_), limit)) *
         block_tokens_;
}

uint32_t BatchShape::Fill(StopContext& context, RequestId id, uint32_t sequence_tokens,
                          uint32_t cached_tokens, uint64_t used_blocks,
                          const Source& source) const {
  const uint32_t after = SharedPrefixTokens(id, cached_tokens, source);
  context.batch_kv_tokens = kv_tokens_;
  context.batch_unique_kv_tokens = used_blocks * block_tokens_;
  context.batch_common_prefix_tokens = prefix_tokens_ == kNoPrefix ? 0 : prefix_tokens_;
  context.candidate_tokens = sequence_tokens;
  context.candidate_cached_tokens = cached_tokens;
  context.candidate_common_prefix_tokens = after;
  context.kv_block_tokens = block_tokens_;
  const ChainView chain = source.ChainOf(id);
  for (size_t d = 0; d < kDepths; ++d) {
    PrefixHash key = 0;
    const bool has_key = GroupKey(chain, d, key);
    const Group& g = groups_[d];
    StopContext::PrefixGroup& out = context.largest_groups[d];
    out = {g.requests, g.prefix_tokens, g.requests > 0 && has_key && key == g.key, 0, false};
    if (g.requests == 0) continue;
    if (const uint32_t* w = waiting_.Find(g.key)) out.waiting = *w;
    // Nested in the first depth's largest group: its member's key there is that group's.
    PrefixHash first = 0;
    out.nested =
        d == 0 || (GroupKey(source.ChainOf(g.member), 0, first) && first == groups_[0].key);
  }
  return after;
}

void BatchShape::Waiting(ChainView chain, int delta) {
  for (size_t d = 0; d < kDepths; ++d) {
    PrefixHash key = 0;
    if (!GroupKey(chain, d, key)) return;
    if (delta > 0) {
      ++*waiting_.Insert(key, 0).first;
      continue;
    }
    // Groups whose last waiting request left are forgotten: the map holds the groups waiting
    // now, not every group a long run has seen.
    uint32_t* count = waiting_.Find(key);
    if (count == nullptr) continue;
    if (--*count == 0) waiting_.Erase(key);
  }
}

// BatchShapeTracker.

void BatchShapeTracker::SetChain(RequestId id, std::span<const PrefixHash> chain) {
  if (id >= entries_.size()) entries_.resize(size_t{id} + 1);
  entries_[id].chain.assign(chain.begin(), chain.end());
}

void BatchShapeTracker::Enter(RequestId id, std::span<const PrefixHash> chain) {
  Leave(id);
  SetChain(id, chain);
  entries_[id].in = true;
  order_.push_back(id);
  for (const PrefixHash h : entries_[id].chain) ++*holders_.Insert(h, 0).first;
}

void BatchShapeTracker::Leave(RequestId id) {
  if (!Contains(id)) return;
  Entry& e = entries_[id];
  e.in = false;
  order_.erase(std::find(order_.begin(), order_.end(), id));
  for (const PrefixHash h : e.chain) {
    uint32_t* count = holders_.Find(h);
    if (--*count == 0) holders_.Erase(h);
  }
}

ChainView BatchShapeTracker::ChainOf(RequestId id) const { return ChainView(entries_[id].chain); }

uint32_t BatchShapeTracker::HeldPrefixBlocks(RequestId id, uint32_t holders) const {
  const std::vector<PrefixHash>& chain = entries_[id].chain;
  uint32_t held = 0;
  while (held < chain.size()) {
    const uint32_t* count = holders_.Find(chain[held]);
    if (count == nullptr || *count < holders) break;
    ++held;
  }
  return held;
}

void BatchShapeTracker::BeginRound(std::span<const uint32_t> sequence_tokens,
                                   int64_t common_prefix_tokens) {
  shape_.Clear();
  last_candidate_ = kNoRequest;
  for (size_t i = 0; i < order_.size(); ++i) {
    shape_.AddRunning(order_[i], i < sequence_tokens.size() ? sequence_tokens[i] : 0, *this);
  }
  if (!order_.empty()) {
    shape_.SetCommonPrefixTokens(
        common_prefix_tokens >= 0
            ? static_cast<uint32_t>(common_prefix_tokens)
            : HeldPrefixBlocks(order_.front(), static_cast<uint32_t>(order_.size())) *
                  shape_.block_tokens());
  }
  round_open_ = true;
}

uint32_t BatchShapeTracker::Fill(StopContext& context, RequestId id,
                                 std::span<const PrefixHash> chain, uint32_t sequence_tokens,
                                 uint32_t cached_tokens, uint64_t used_blocks) {
  if (!Contains(id)) SetChain(id, chain);
  last_candidate_ = id;
  last_prefix_after_ = shape_.Fill(context, id, sequence_tokens, cached_tokens, used_blocks, *this);
  return last_prefix_after_;
}

void BatchShapeTracker::Admit(RequestId id, std::span<const PrefixHash> chain,
                              uint32_t sequence_tokens) {
  if (!round_open_) {
    Enter(id, chain);
    return;
  }
  uint32_t after = 0;
  if (id == last_candidate_) {
    after = last_prefix_after_;
  } else {
    // Not the candidate filled last: take its whole chain as its cache hit.
    StopContext scratch;
    SetChain(id, chain);
    after = shape_.Fill(scratch, id, sequence_tokens,
                        static_cast<uint32_t>(chain.size()) * shape_.block_tokens(), 0, *this);
  }
  Enter(id, chain);
  shape_.Admit(id, sequence_tokens, after, *this);
  last_candidate_ = kNoRequest;
}

}  // namespace feather
