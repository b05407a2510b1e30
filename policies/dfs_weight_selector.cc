// dfs_weight_selector.cc: SGLang's DFS-weight ranking over the matched part of the radix tree.
#include "policies/dfs_weight_selector.h"

#include <algorithm>

#include "base/check.h"

namespace feather {

DfsWeightSelector::DfsWeightSelector(const DfsWeightConfig& config)
    : RadixSelectorBase(RadixCacheConfig{config.page_size, config.cache_capacity_tokens}) {}

size_t DfsWeightSelector::MemoryBytes() const {
  const size_t per_node = stamp_.capacity() + weight_.capacity() + first_request_.capacity() +
                          last_request_.capacity() + child_begin_.capacity() +
                          child_end_.capacity();
  return RadixSelectorBase::MemoryBytes() + per_node * sizeof(uint32_t) +
         (last_node_.capacity() + next_request_.capacity() + touched_.capacity() +
          sorted_children_.capacity()) *
             sizeof(uint32_t) +
         stack_.capacity() * sizeof(Frame);
}

void DfsWeightSelector::ComputeOrder() {
  const size_t w = waiting_.size();
  if (w == 0) return;

  // 1. Match every waiting request; matching may split edges, so size node tables afterwards.
  last_node_.resize(w);
  next_request_.assign(w, kNone);
  for (size_t i = 0; i < w; ++i) {
    const RequestId id = waiting_[i].id;
    const RadixMatch match = cache_.MatchPrefix(MatchKey(id));
    last_node_[i] = match.node;
    matched_tokens_[id] = match.matched_tokens;
  }
  const size_t bound = cache_.NodeIdBound();
  if (stamp_.size() < bound) {
    stamp_.resize(bound, 0);
    weight_.resize(bound);
    first_request_.resize(bound);
    last_request_.resize(bound);
    child_begin_.resize(bound);
    child_end_.resize(bound);
  }
  if (++round_ == 0) {  // stamp wrap-around: forget every old stamp
    std::fill(stamp_.begin(), stamp_.end(), 0u);
    round_ = 1;
  }

  // 2. Collect the nodes on the matched paths; attach requests to their last node, queue order.
  touched_.clear();
  for (size_t i = 0; i < w; ++i) {
    const RadixNodeId last = last_node_[i];
    for (RadixNodeId a = last; a != kNoRadixNode && stamp_[a] != round_; a = cache_.Parent(a)) {
      stamp_[a] = round_;
      weight_[a] = 0;
      first_request_[a] = kNone;
      last_request_[a] = kNone;
      child_begin_[a] = 0;
      child_end_[a] = 0;
      touched_.push_back(a);
    }
    ++weight_[last];
    const uint32_t index = static_cast<uint32_t>(i);
    if (first_request_[last] == kNone) {
      first_request_[last] = index;
    } else {
      next_request_[last_request_[last]] = index;
    }
    last_request_[last] = index;
  }

  // 3. Subtree weights: children before parents (a child ends strictly deeper than its parent).
  std::sort(touched_.begin(), touched_.end(), [this](RadixNodeId a, RadixNodeId b) {
    const uint64_t da = cache_.EndDepthTokens(a);
    const uint64_t db = cache_.EndDepthTokens(b);
    return da != db ? da > db : a < b;
  });
  for (const RadixNodeId a : touched_) {
    if (a != cache_.Root()) weight_[cache_.Parent(a)] += weight_[a];
  }

  // 4. Group children by parent, heaviest first, ties in SGLang's child-dict order.
  sorted_children_.clear();
  for (const RadixNodeId a : touched_) {
    if (a != cache_.Root()) sorted_children_.push_back(a);
  }
  std::sort(sorted_children_.begin(), sorted_children_.end(), [this](RadixNodeId a, RadixNodeId b) {
    const RadixNodeId pa = cache_.Parent(a);
    const RadixNodeId pb = cache_.Parent(b);
    if (pa != pb) return pa < pb;
    if (weight_[a] != weight_[b]) return weight_[a] > weight_[b];
    return cache_.SiblingRank(a) < cache_.SiblingRank(b);
  });
  for (uint32_t k = 0; k < sorted_children_.size(); ++k) {
    const RadixNodeId parent = cache_.Parent(sorted_children_[k]);
    if (child_end_[parent] == 0) child_begin_[parent] = k;
    child_end_[parent] = k + 1;
  }

  // 5. Depth-first from the root; a node's requests follow its subtrees (post-order).
  stack_.clear();
  stack_.push_back(Frame{cache_.Root(), child_begin_[cache_.Root()]});
  while (!stack_.empty()) {
    Frame& top = stack_.back();
    if (top.next_child < child_end_[top.node]) {
      const RadixNodeId child = sorted_children_[top.next_child++];
      stack_.push_back(Frame{child, child_begin_[child]});  // invalidates `top`
      continue;
    }
    for (uint32_t r = first_request_[top.node]; r != kNone; r = next_request_[r]) {
      order_.push_back(r);
    }
    stack_.pop_back();
  }
}

}  // namespace feather
