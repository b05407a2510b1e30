// block_table_selector.cc: grouping of waiting requests by shared vLLM block hashes (see header).
#include "policies/block_table_selector.h"

#include <algorithm>

#include "base/check.h"

namespace feather {
namespace {

constexpr uint32_t kNoGroup = 0xffffffffu;
constexpr uint32_t kNil = 0xffffffffu;  // no list node, no record slot
// Compact the chain arena once departed chains are more than half of it (and not tiny).
constexpr uint64_t kMinGarbageToCompact = 4096;

}  // namespace

BlockTableSelector::BlockTableSelector(const BlockHashConfig& config) : table_(config) {
  table_.EnableChangeLog();
}

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

bool BlockTableSelector::Holds(int depth, const BlockRecord& block) {
  // Flags() bits are in depth order: cached, running, shared.
  return ((block.Flags() >> depth) & 1u) != 0;
}

uint32_t BlockTableSelector::RescanDepth(const Request& r, int depth) const {
  const uint32_t* slots = SlotsOf(r);
  uint32_t d = 0;
  while (d < r.chain_blocks && Holds(depth, table_.Record(slots[d]))) ++d;
  return d;
}

uint32_t BlockTableSelector::NodeSlot(uint32_t node) const {
  const Request& r = requests_[node / kNodesPerRequest];
  const uint32_t d = r.depth[(node % kNodesPerRequest) / 2];
  if ((node & 1u) != 0) return d == 0 ? kNil : SlotsOf(r)[d - 1];  // tip
  return d == r.chain_blocks ? kNil : SlotsOf(r)[d];               // frontier
}

void BlockTableSelector::LinkNode(uint32_t node) {
  const uint32_t slot = NodeSlot(node);
  if (slot == kNil) return;
  const uint32_t head = list_head_[slot];
  links_[node] = Link{kNil, head};
  if (head != kNil) links_[head].prev = node;
  list_head_[slot] = node;
}

void BlockTableSelector::UnlinkNode(uint32_t node) {
  const uint32_t slot = NodeSlot(node);
  if (slot == kNil) return;
  const Link link = links_[node];
  if (link.prev == kNil) {
    list_head_[slot] = link.next;
  } else {
    links_[link.prev].next = link.next;
  }
  if (link.next != kNil) links_[link.next].prev = link.prev;
}

void BlockTableSelector::SetDepth(RequestId id, int depth, uint32_t value) {
  const uint32_t frontier = id * kNodesPerRequest + static_cast<uint32_t>(depth) * 2;
  UnlinkNode(frontier);
  UnlinkNode(frontier + 1);
  requests_[id].depth[depth] = value;
  LinkNode(frontier);
  LinkNode(frontier + 1);
}

void BlockTableSelector::MeasureAndLink(RequestId id) {
  Request& r = requests_[id];
  for (int depth = 0; depth < kDepths; ++depth) r.depth[depth] = RescanDepth(r, depth);
  for (uint32_t k = 0; k < kNodesPerRequest; ++k) LinkNode(id * kNodesPerRequest + k);
}

void BlockTableSelector::UnlinkAll(RequestId id) {
  for (uint32_t k = 0; k < kNodesPerRequest; ++k) UnlinkNode(id * kNodesPerRequest + k);
}

void BlockTableSelector::ApplyTableChanges() {
  for (const uint32_t slot : table_.ChangedSlots()) {
    // Copy the list first: moving a node relinks it, possibly onto this same list.
    visit_scratch_.clear();
    for (uint32_t node = list_head_[slot]; node != kNil; node = links_[node].next) {
      visit_scratch_.push_back(node);
    }
    const BlockRecord& block = table_.Record(slot);
    for (const uint32_t node : visit_scratch_) {
      if (NodeSlot(node) != slot) continue;  // moved off this list earlier in the walk
      const int depth = static_cast<int>(node % kNodesPerRequest) / 2;
      const bool tip = (node & 1u) != 0;
      const bool holds = Holds(depth, block);
      // A tip block that still has the fact or a frontier block that still lacks it: no move.
      if (tip == holds) continue;
      const RequestId id = node / kNodesPerRequest;
      const Request& r = requests_[id];
      const uint32_t* slots = SlotsOf(r);
      uint32_t d = r.depth[depth];
      if (holds) {  // the frontier block gained the fact: advance past every block that has it
        while (d < r.chain_blocks && Holds(depth, table_.Record(slots[d]))) ++d;
      } else {  // the tip block lost it: retract to the last block that still has it
        while (d > 0 && !Holds(depth, table_.Record(slots[d - 1]))) --d;
      }
      SetDepth(id, depth, d);
    }
  }
  table_.ClearChangedSlots();
}

void BlockTableSelector::OnArrival(const RequestInfo& request) {
  const RequestId id = request.id;
  FEATHER_CHECK(id != kNoRequest, "request id kNoRequest is reserved");
  FEATHER_CHECK(id < kNil / kNodesPerRequest, "request id too large for the depth lists");
  if (id >= requests_.size()) {
    requests_.resize(std::max<size_t>(size_t{id} + 1, requests_.size() * 2));
    links_.resize(requests_.size() * kNodesPerRequest);
  }
  FEATHER_CHECK(requests_[id].state == State::kAbsent, "request id arrived while still in use");
  Request& r = requests_[id];
  r.chain_offset = arena_.size();
  r.chain_blocks = static_cast<uint32_t>(table_.ComputeChain(request.prompt_tokens, arena_));
  r.round = 0;
  r.state = State::kWaiting;
  table_.AddWaiting(ChainOf(r), arena_slots_);
  if (list_head_.size() < table_.NumSlots()) list_head_.resize(table_.NumSlots(), kNil);
  ApplyTableChanges();  // blocks the newcomer makes shared for other waiting requests
  MeasureAndLink(id);
  PushBack(id);
}

void BlockTableSelector::BeginRound() {
  ++round_;
  order_.clear();
  cursor_ = 0;
  groups_.clear();
  queue_scratch_.clear();
  if (group_of_slot_.size() < table_.NumSlots()) group_of_slot_.resize(table_.NumSlots(), kNoGroup);

  // Read every waiting request's depths and assign groups in queue order (deterministic indices).
  uint32_t ungrouped = 0;
  for (RequestId id = head_; id != kNoRequest; id = requests_[id].next) {
    Request& r = requests_[id];
    r.round = round_;
    r.stats = BlockRoundStats{r.depth[kCached], r.depth[kRunning], r.depth[kShared]};
    const BlockRoundStats& s = r.stats;
    if (s.shared_blocks == 0) {
      r.round_group = kNoGroup;
      ++ungrouped;
    } else {
      const uint32_t key = SlotsOf(r)[s.shared_blocks - 1];
      uint32_t group = group_of_slot_[key];
      if (group >= groups_.size() || groups_[group].key_slot != key) {
        group = static_cast<uint32_t>(groups_.size());
        group_of_slot_[key] = group;
        groups_.push_back(RoundGroup{key, 0, std::min(s.cached_blocks, s.shared_blocks),
                                     s.running_blocks, static_cast<uint32_t>(queue_scratch_.size()),
                                     0});
      }
      r.round_group = group;
      ++groups_[group].size;
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
  UnlinkAll(id);
  table_.AdmitSlots(SlotSpan(r));
  ApplyTableChanges();
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
  // Copy the live chains to the scratch arenas and swap: O(live hashes + ids), amortized O(1)
  // per departed hash since at least half of the arena was garbage. The depth lists link
  // requests, not arena positions, so they survive the move.
  arena_scratch_.clear();
  arena_slots_scratch_.clear();
  for (Request& live : requests_) {
    if (live.state == State::kAbsent) continue;
    const std::span<const PrefixHash> chain = ChainOf(live);
    const uint32_t* slots = SlotsOf(live);
    live.chain_offset = arena_scratch_.size();
    arena_scratch_.insert(arena_scratch_.end(), chain.begin(), chain.end());
    arena_slots_scratch_.insert(arena_slots_scratch_.end(), slots, slots + chain.size());
  }
  arena_.swap(arena_scratch_);
  arena_slots_.swap(arena_slots_scratch_);
  arena_garbage_ = 0;
}

void BlockTableSelector::OnFinish(RequestId id) {
  FEATHER_CHECK(id < requests_.size() && requests_[id].state == State::kRunning,
                "finished id is not running");
  table_.ReleaseSlots(SlotSpan(requests_[id]));
  ApplyTableChanges();
  ReleaseChain(id);
}

void BlockTableSelector::OnPreempt(RequestId id) {
  FEATHER_CHECK(id < requests_.size() && requests_[id].state == State::kRunning,
                "preempted id is not running");
  Request& r = requests_[id];
  table_.PreemptSlots(SlotSpan(r));
  ApplyTableChanges();
  r.state = State::kWaiting;
  r.round = 0;  // not part of the current round's order
  MeasureAndLink(id);
  PushFront(id);
}

void BlockTableSelector::OnCancel(RequestId id) {
  FEATHER_CHECK(id < requests_.size() && requests_[id].state == State::kWaiting,
                "cancelled id is not waiting");
  UnlinkAll(id);
  table_.RemoveWaitingSlots(SlotSpan(requests_[id]));
  ApplyTableChanges();
  Unlink(id);
  ReleaseChain(id);
}

size_t BlockTableSelector::MemoryBytes() const {
  return sizeof(*this) + table_.MemoryBytes() - sizeof(table_) +
         requests_.capacity() * sizeof(Request) + arena_.capacity() * sizeof(PrefixHash) +
         arena_scratch_.capacity() * sizeof(PrefixHash) +
         (arena_slots_.capacity() + arena_slots_scratch_.capacity()) * sizeof(uint32_t) +
         (list_head_.capacity() + visit_scratch_.capacity()) * sizeof(uint32_t) +
         links_.capacity() * sizeof(Link) + order_.capacity() * sizeof(RequestId) +
         queue_scratch_.capacity() * sizeof(RequestId) + groups_.capacity() * sizeof(RoundGroup) +
         (group_rank_.capacity() + group_of_slot_.capacity()) * sizeof(uint32_t);
}

void BlockTableSelector::CheckInvariants() const {
  // Every waiting request's depths equal a rescan that probes the table by hash, as the O(W·C)
  // BeginRound once did, and its chain's slots are the table's.
  size_t expected_nodes = 0;
  size_t waiting = 0;
  for (RequestId id = head_; id != kNoRequest; id = requests_[id].next) {
    const Request& r = requests_[id];
    FEATHER_CHECK(r.state == State::kWaiting, "queued request is not waiting");
    ++waiting;
    const std::span<const PrefixHash> chain = ChainOf(r);
    for (size_t i = 0; i < chain.size(); ++i) {
      FEATHER_CHECK(table_.Find(chain[i]) == &table_.Record(SlotsOf(r)[i]), "chain slot");
    }
    for (int depth = 0; depth < kDepths; ++depth) {
      uint32_t want = 0;
      while (want < chain.size() && Holds(depth, *table_.Find(chain[want]))) ++want;
      FEATHER_CHECK(r.depth[depth] == want, "incremental depth differs from a rescan");
      expected_nodes += (want > 0 ? 1 : 0) + (want < chain.size() ? 1 : 0);
    }
  }
  FEATHER_CHECK(waiting == num_waiting_, "waiting count");
  // Every list node belongs to a waiting request and sits on the list its depth names.
  size_t nodes = 0;
  for (uint32_t slot = 0; slot < list_head_.size(); ++slot) {
    uint32_t prev = kNil;
    for (uint32_t node = list_head_[slot]; node != kNil; node = links_[node].next) {
      FEATHER_CHECK(links_[node].prev == prev, "list links");
      FEATHER_CHECK(requests_[node / kNodesPerRequest].state == State::kWaiting,
                    "list node of a request that is not waiting");
      FEATHER_CHECK(NodeSlot(node) == slot, "list node on the wrong block");
      prev = node;
      ++nodes;
    }
  }
  FEATHER_CHECK(nodes == expected_nodes, "list node count");
}

}  // namespace feather
