// dfs_weight_selector.h: SGLang's "dfs-weight" scheduling policy.
//
// Provides DfsWeightSelector. Each BeginRound() matches every waiting request against the radix
// cache (the match splits the last edge, so each request's last node ends exactly at its matched
// prefix), weighs every node by the number of waiting requests whose last node lies in its
// subtree, and walks the tree depth first from the root, visiting children heaviest first (ties:
// SGLang's child-dict order, i.e. the order the children's first tokens were first inserted) and
// emitting the requests attached to a node after its children (post-order), in queue order, as
// SGLang's _sort_by_dfs_weight / get_dfs_priority do. Requests with no cached prefix hang off the
// root and come last. Unlike LPM there is no FCFS fallback and no in-batch deprioritization.
// The cache lifecycle (Admit inserts and locks the prompt, OnFinish unlocks, OnPreempt unlocks
// and re-queues) is RadixSelectorBase's.
//
// Use it as the SGLang DFS-weight baseline.
//
// Complexity per round, W waiting requests of at most T tokens: O(W·T + K log K), where K <= B
// (the radix nodes) is the number of nodes on the waiting requests' matched paths: only those
// nodes are weighed and sorted, never the whole tree. Other operations as in lpm_selector.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "policies/lpm_selector.h"

namespace feather {

struct DfsWeightConfig {
  uint32_t page_size = 1;
  uint64_t cache_capacity_tokens = 0;  // 0 = unbounded
};

class DfsWeightSelector final : public RadixSelectorBase {
 public:
  explicit DfsWeightSelector(const DfsWeightConfig& config = {});

  [[nodiscard]] std::string_view Name() const override { return "dfs-weight"; }
  [[nodiscard]] size_t MemoryBytes() const override;

 private:
  void ComputeOrder() override;

  static constexpr uint32_t kNone = 0xffffffffu;

  // Per-node scratch, valid where stamp_ == round_ (no clearing between rounds).
  std::vector<uint32_t> stamp_;
  std::vector<uint32_t> weight_;
  std::vector<uint32_t> first_request_;  // head of the node's attached requests (waiting_ index)
  std::vector<uint32_t> last_request_;
  std::vector<uint32_t> child_begin_;  // the node's children: sorted_children_[begin, end)
  std::vector<uint32_t> child_end_;
  // Per waiting-queue index.
  std::vector<RadixNodeId> last_node_;
  std::vector<uint32_t> next_request_;
  // Per round.
  std::vector<RadixNodeId> touched_;
  std::vector<RadixNodeId> sorted_children_;
  struct Frame {
    RadixNodeId node;
    uint32_t next_child;
  };
  std::vector<Frame> stack_;
  uint32_t round_ = 0;
};

}  // namespace feather
