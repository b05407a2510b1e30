// block_table_selector.cc: grouping of waiting requests by shared vLLM block hashes (see header).
#include "policies/block_table_selector.h"

#include <algorithm>

#include "base/check.h"

namespace feather {
namespace {

constexpr uint32_t kNoGroup = 0xffffffffu;
// Compact the chain arena once departed chains are more than half of it (and not tiny).
constexpr uint64_t kMinGarbageToCompact = 4096;

}  // namespace

BlockTableSelector::BlockTableSelector(const BlockHashConfig& config) : table_(config) {}

std::span<const PrefixHash> BlockTableSelector::Chain(RequestId id) const {
  FEATHER_CHECK(id < requests_.size() && requests_[id].state != State::kAbsent, "unknown id");
  return ChainOf(requests_[id]);
}

std::optional<BlockRoundStats> BlockTableSelector::RoundStats(RequestId id) const {
  if (id >= requests_.size() || round_ == 0 || requests_[id].round != round_) return std::nullopt;
  return requests_[id].stats;
}

void BlockTableSelector::PushBack(RequestId id) {
  Request& r = requests_[id];
  r.prev = tail_;
  r.next = kNoRequest;
  if (tail_ == kNoRequest) {
    head_ = id;
  } else {
    requests_[tail_].next = id;
  }
  tail_ = id;
  ++num_waiting_;
}

void BlockTableSelector::PushFront(RequestId id) {
  Request& r = requests_[id];
  r.prev = kNoRequest;
  r.next = head_;
  if (head_ == kNoRequest) {
    tail_ = id;
  } else {
    requests_[head_].prev = id;
  }
  head_ = id;
  ++num_waiting_;
}

void BlockTableSelector::Unlink(RequestId id) {
  const Request& r = requests_[id];
  if (r.prev == kNoRequest) {
    head_ = r.next;
  } else {
    requests_[r.prev].next = r.next;
  }
  if (r.next == kNoRequest) {
    tail_ = r.prev;
  } else {
    requests_[r.next].prev = r.prev;
  }
  --num_waiting_;
}

void BlockTableSelector::OnArrival(const RequestInfo& request) {
  const RequestId id = request.id;
  FEATHER_CHECK(id != kNoRequest, "request id kNoRequest is reserved");
  if (id >= requests_.size()) {
    requests_.resize(std::max<size_t>(size_t{id} + 1, requests_.size() * 2));
  }
  FEATHER_CHECK(requests_[id].state == State::kAbsent, "request id arrived while still in use");
  Request& r = requests_[id];
  r.chain_offset = arena_.size();
  r.chain_blocks = static_cast<uint32_t>(table_.ComputeChain(request.prompt_tokens, arena_));
  r.round = 0;
  r.state = State::kWaiting;
  table_.AddWaiting(ChainOf(r));
  PushBack(id);
}

BlockRoundStats BlockTableSelector::Measure(std::span<const PrefixHash> chain) const {
  BlockRoundStats stats;
  bool cached = true;
  bool running = true;
  bool shared = true;
  for (size_t i = 0; i < chain.size() && (cached || running || shared); ++i) {
    const BlockRecord* block = table_.Find(chain[i]);
    FEATHER_DCHECK(block != nullptr && block->waiting_refs > 0, "waiting block not referenced");
    cached = cached && block->cached;
    running = running && block->running_refs > 0;
    // The request's own waiting reference is one of the counted references.
    shared = shared && block->waiting_refs + block->running_refs >= 2;
    stats.cached_blocks += cached ? 1 : 0;
    stats.running_blocks += running ? 1 : 0;
    stats.shared_blocks += shared ? 1 : 0;
  }
  return stats;
}

void BlockTableSelector::BeginRound() {
  ++round_;
  order_.clear();
  cursor_ = 0;
  groups_.clear();
  group_of_hash_.Clear();
  queue_scratch_.clear();

  // Measure every waiting request and assign groups in queue order (deterministic indices).
  uint32_t ungrouped = 0;
  for (RequestId id = head_; id != kNoRequest; id = requests_[id].next) {
    Request& r = requests_[id];
    const std::span<const PrefixHash> chain = ChainOf(r);
    r.round = round_;
    r.stats = Measure(chain);
    const BlockRoundStats& s = r.stats;
    if (s.shared_blocks == 0) {
      r.round_group = kNoGroup;
      ++ungrouped;
    } else {
      const auto next_group = static_cast<uint32_t>(groups_.size());
      const auto [group, inserted] = group_of_hash_.Insert(chain[s.shared_blocks - 1], next_group);
      if (inserted) {
        groups_.push_back(RoundGroup{0, std::min(s.cached_blocks, s.shared_blocks),
                                     s.running_blocks, static_cast<uint32_t>(queue_scratch_.size()),
                                     0});
      }
      r.round_group = *group;
      ++groups_[*group].size;
    }
    queue_scratch_.push_back(id);
  }

  group_rank_.resize(groups_.size());
  for (uint32_t g = 0; g < groups_.size(); ++g) group_rank_[g] = g;
  std::sort(group_rank_.begin(), group_rank_.end(), [this](uint32_t a, uint32_t b) {
    const RoundGroup& ga = groups_[a];
    const RoundGroup& gb = groups_[b];
    const bool a_running = ga.running_blocks > 0;
    const bool b_running = gb.running_blocks > 0;
    if (a_running != b_running) return a_running;
    if (a_running && ga.cached_blocks != gb.cached_blocks) {
      return ga.cached_blocks > gb.cached_blocks;
    }
    if (ga.size != gb.size) return ga.size > gb.size;
    return ga.first_index < gb.first_index;  // unique: a strict total order
  });

  // Counting placement: members keep queue order inside their group.
  uint32_t offset = 0;
  for (const uint32_t g : group_rank_) {
    groups_[g].fill = offset;
    offset += groups_[g].size;
  }
  uint32_t ungrouped_fill = offset;
  FEATHER_DCHECK(offset + ungrouped == queue_scratch_.size(), "group sizes");
  order_.resize(queue_scratch_.size());
  for (const RequestId id : queue_scratch_) {
    const uint32_t g = requests_[id].round_group;
    order_[g == kNoGroup ? ungrouped_fill++ : groups_[g].fill++] = id;
  }
}

std::optional<Candidate> BlockTableSelector::Next() {
  while (cursor_ < order_.size()) {
    const Request& r = requests_[order_[cursor_]];
    if (r.state == State::kWaiting && r.round == round_) {
      return Candidate{order_[cursor_], std::nullopt};
    }
    ++cursor_;  // admitted out of turn, cancelled, or re-queued after BeginRound()
  }
  return std::nullopt;
}

void BlockTableSelector::Admit(RequestId id) {
  FEATHER_CHECK(id < requests_.size() && requests_[id].state == State::kWaiting,
                "admitted id is not waiting");
  FEATHER_DCHECK(cursor_ < order_.size() && order_[cursor_] == id,
                 "Admit() of a request Next() did not propose");
  Request& r = requests_[id];
  table_.Admit(ChainOf(r));
  Unlink(id);
  r.state = State::kRunning;
  if (cursor_ < order_.size() && order_[cursor_] == id) ++cursor_;
}

void BlockTableSelector::ReleaseChain(RequestId id) {
  Request& r = requests_[id];
  r.state = State::kAbsent;
  arena_garbage_ += r.chain_blocks;
  r.chain_blocks = 0;
  if (arena_garbage_ < kMinGarbageToCompact || arena_garbage_ * 2 <= arena_.size()) return;
  // Copy the live chains to the scratch arena and swap: O(live hashes + ids), amortized O(1)
  // per departed hash since at least half of the arena was garbage.
  arena_scratch_.clear();
  for (Request& live : requests_) {
    if (live.state == State::kAbsent) continue;
    const std::span<const PrefixHash> chain = ChainOf(live);
    live.chain_offset = arena_scratch_.size();
    arena_scratch_.insert(arena_scratch_.end(), chain.begin(), chain.end());
  }
  arena_.swap(arena_scratch_);
  arena_garbage_ = 0;
}

void BlockTableSelector::OnFinish(RequestId id) {
  FEATHER_CHECK(id < requests_.size() && requests_[id].state == State::kRunning,
                "finished id is not running");
  table_.Release(ChainOf(requests_[id]));
  ReleaseChain(id);
}

void BlockTableSelector::OnPreempt(RequestId id) {
  FEATHER_CHECK(id < requests_.size() && requests_[id].state == State::kRunning,
                "preempted id is not running");
  Request& r = requests_[id];
  table_.Preempt(ChainOf(r));
  r.state = State::kWaiting;
  r.round = 0;  // not part of the current round's order
  PushFront(id);
}

void BlockTableSelector::OnCancel(RequestId id) {
  FEATHER_CHECK(id < requests_.size() && requests_[id].state == State::kWaiting,
                "cancelled id is not waiting");
  table_.RemoveWaiting(ChainOf(requests_[id]));
  Unlink(id);
  ReleaseChain(id);
}

size_t BlockTableSelector::MemoryBytes() const {
  return sizeof(*this) + table_.MemoryBytes() - sizeof(table_) +
         requests_.capacity() * sizeof(Request) + arena_.capacity() * sizeof(PrefixHash) +
         arena_scratch_.capacity() * sizeof(PrefixHash) + order_.capacity() * sizeof(RequestId) +
         queue_scratch_.capacity() * sizeof(RequestId) + groups_.capacity() * sizeof(RoundGroup) +
         group_rank_.capacity() * sizeof(uint32_t) + group_of_hash_.MemoryBytes();
}

}  // namespace feather
