// oracle_selector.cc: per-group FIFOs and an indexed heap of groups (see the header).
#include "policies/oracle_selector.h"

#include <algorithm>

#include "base/check.h"

namespace feather {
namespace {

// Dense caller group ids are expected; a huge id is a caller bug, not a workload.
constexpr uint32_t kMaxPrefixGroups = 1u << 26;

}  // namespace

uint32_t OracleSelector::GroupSlotFor(uint32_t prefix_group) {
  if (prefix_group == kNoPrefixGroup) {
    uint32_t slot;
    if (!free_slots_.empty()) {
      slot = free_slots_.back();
      free_slots_.pop_back();
      groups_[slot] = Group{};
    } else {
      slot = static_cast<uint32_t>(groups_.size());
      groups_.emplace_back();
    }
    groups_[slot].singleton = true;
    return slot;
  }
  FEATHER_CHECK(prefix_group < kMaxPrefixGroups, "prefix group ids must be dense");
  if (prefix_group >= external_slot_.size()) {
    external_slot_.resize(std::max<size_t>(size_t{prefix_group} + 1, external_slot_.size() * 2),
                          kNil);
  }
  uint32_t& slot = external_slot_[prefix_group];
  if (slot == kNil) {
    slot = static_cast<uint32_t>(groups_.size());
    groups_.emplace_back();
  }
  return slot;
}

void OracleSelector::PushBack(uint32_t slot, RequestId id) {
  Group& g = groups_[slot];
  Request& r = requests_[id];
  r.prev = g.tail;
  r.next = kNoRequest;
  if (g.tail == kNoRequest) {
    g.head = id;
  } else {
    requests_[g.tail].next = id;
  }
  g.tail = id;
  ++g.waiting;
  ++num_waiting_;
}

void OracleSelector::PushFront(uint32_t slot, RequestId id) {
  Group& g = groups_[slot];
  Request& r = requests_[id];
  r.prev = kNoRequest;
  r.next = g.head;
  if (g.head == kNoRequest) {
    g.tail = id;
  } else {
    requests_[g.head].prev = id;
  }
  g.head = id;
  ++g.waiting;
  ++num_waiting_;
}

void OracleSelector::Unlink(uint32_t slot, RequestId id) {
  Group& g = groups_[slot];
  const Request& r = requests_[id];
  if (r.prev == kNoRequest) {
    g.head = r.next;
  } else {
    requests_[r.prev].next = r.next;
  }
  if (r.next == kNoRequest) {
    g.tail = r.prev;
  } else {
    requests_[r.next].prev = r.prev;
  }
  --g.waiting;
  --num_waiting_;
}

bool OracleSelector::Better(uint32_t a, uint32_t b) const {
  const Group& ga = groups_[a];
  const Group& gb = groups_[b];
  if (ga.running != gb.running) return ga.running > gb.running;
  if (ga.waiting != gb.waiting) return ga.waiting > gb.waiting;
  // Positions are unique per request, so this is a strict total order: deterministic ties.
  return requests_[ga.head].position < requests_[gb.head].position;
}

void OracleSelector::HeapSet(uint32_t pos, uint32_t slot) {
  heap_[pos] = slot;
  groups_[slot].heap_pos = pos;
}

void OracleSelector::SiftUp(uint32_t pos) {
  const uint32_t slot = heap_[pos];
  while (pos > 0) {
    const uint32_t parent = (pos - 1) / 2;
    if (!Better(slot, heap_[parent])) break;
    HeapSet(pos, heap_[parent]);
    pos = parent;
  }
  HeapSet(pos, slot);
}

void OracleSelector::SiftDown(uint32_t pos) {
  const uint32_t slot = heap_[pos];
  const auto size = static_cast<uint32_t>(heap_.size());
  for (;;) {
    uint32_t child = 2 * pos + 1;
    if (child >= size) break;
    if (child + 1 < size && Better(heap_[child + 1], heap_[child])) ++child;
    if (!Better(heap_[child], slot)) break;
    HeapSet(pos, heap_[child]);
    pos = child;
  }
  HeapSet(pos, slot);
}

void OracleSelector::Reposition(uint32_t slot) {
  Group& g = groups_[slot];
  if (g.waiting > 0) {
    if (g.heap_pos == kNil) {
      heap_.push_back(slot);
      g.heap_pos = static_cast<uint32_t>(heap_.size() - 1);
      SiftUp(g.heap_pos);
    } else {
      SiftUp(g.heap_pos);
      SiftDown(g.heap_pos);
    }
  } else if (g.heap_pos != kNil) {
    const uint32_t pos = g.heap_pos;
    g.heap_pos = kNil;
    const uint32_t last = heap_.back();
    heap_.pop_back();
    if (pos < heap_.size()) {
      HeapSet(pos, last);
      SiftUp(pos);
      SiftDown(groups_[last].heap_pos);
    }
  }
}

void OracleSelector::MaybeRelease(uint32_t slot) {
  const Group& g = groups_[slot];
  if (g.singleton && g.waiting == 0 && g.running == 0) free_slots_.push_back(slot);
}

void OracleSelector::OnArrival(const RequestInfo& request) {
  const RequestId id = request.id;
  FEATHER_CHECK(id != kNoRequest, "request id kNoRequest is reserved");
  if (id >= requests_.size()) {
    requests_.resize(std::max<size_t>(size_t{id} + 1, requests_.size() * 2));
  }
  FEATHER_CHECK(requests_[id].state == State::kAbsent, "request id arrived while still in use");
  const uint32_t slot = GroupSlotFor(request.prefix_group);
  Request& r = requests_[id];
  r.group = slot;
  r.position = next_back_position_++;
  r.state = State::kWaiting;
  PushBack(slot, id);
  Reposition(slot);
}

std::optional<Candidate> OracleSelector::Next() {
  if (heap_.empty()) return std::nullopt;
  return Candidate{groups_[heap_[0]].head, std::nullopt};
}

void OracleSelector::Admit(RequestId id) {
  FEATHER_CHECK(id < requests_.size() && requests_[id].state == State::kWaiting,
                "admitted id is not waiting");
  FEATHER_DCHECK(!heap_.empty() && groups_[heap_[0]].head == id,
                 "Admit() of a request Next() did not propose");
  const uint32_t slot = requests_[id].group;
  Unlink(slot, id);
  requests_[id].state = State::kRunning;
  ++groups_[slot].running;
  Reposition(slot);
}

void OracleSelector::OnFinish(RequestId id) {
  FEATHER_CHECK(id < requests_.size() && requests_[id].state == State::kRunning,
                "finished id is not running");
  const uint32_t slot = requests_[id].group;
  requests_[id].state = State::kAbsent;
  --groups_[slot].running;
  Reposition(slot);
  MaybeRelease(slot);
}

void OracleSelector::OnPreempt(RequestId id) {
  FEATHER_CHECK(id < requests_.size() && requests_[id].state == State::kRunning,
                "preempted id is not running");
  const uint32_t slot = requests_[id].group;
  Request& r = requests_[id];
  r.state = State::kWaiting;
  r.position = next_front_position_--;
  --groups_[slot].running;
  PushFront(slot, id);
  Reposition(slot);
}

void OracleSelector::OnCancel(RequestId id) {
  FEATHER_CHECK(id < requests_.size() && requests_[id].state == State::kWaiting,
                "cancelled id is not waiting");
  const uint32_t slot = requests_[id].group;
  Unlink(slot, id);
  requests_[id].state = State::kAbsent;
  Reposition(slot);
  MaybeRelease(slot);
}

uint32_t OracleSelector::WaitingInGroup(uint32_t prefix_group) const {
  if (prefix_group >= external_slot_.size() || external_slot_[prefix_group] == kNil) return 0;
  return groups_[external_slot_[prefix_group]].waiting;
}

uint32_t OracleSelector::RunningInGroup(uint32_t prefix_group) const {
  if (prefix_group >= external_slot_.size() || external_slot_[prefix_group] == kNil) return 0;
  return groups_[external_slot_[prefix_group]].running;
}

size_t OracleSelector::MemoryBytes() const {
  return sizeof(*this) + requests_.capacity() * sizeof(Request) +
         groups_.capacity() * sizeof(Group) + external_slot_.capacity() * sizeof(uint32_t) +
         free_slots_.capacity() * sizeof(uint32_t) + heap_.capacity() * sizeof(uint32_t);
}

void OracleSelector::CheckInvariants() const {
  std::vector<uint32_t> waiting(groups_.size(), 0);
  std::vector<uint32_t> running(groups_.size(), 0);
  size_t total_waiting = 0;
  for (const Request& r : requests_) {
    if (r.state == State::kWaiting) {
      ++waiting[r.group];
      ++total_waiting;
    } else if (r.state == State::kRunning) {
      ++running[r.group];
    }
  }
  FEATHER_CHECK(total_waiting == num_waiting_, "waiting count drifted");
  std::vector<uint8_t> free(groups_.size(), 0);
  for (const uint32_t slot : free_slots_) free[slot] = 1;
  size_t in_heap = 0;
  for (uint32_t slot = 0; slot < groups_.size(); ++slot) {
    const Group& g = groups_[slot];
    if (free[slot]) {
      FEATHER_CHECK(g.singleton && waiting[slot] == 0 && running[slot] == 0, "bad free slot");
      continue;
    }
    FEATHER_CHECK(g.waiting == waiting[slot] && g.running == running[slot], "group counts");
    if (g.singleton) FEATHER_CHECK(g.waiting + g.running == 1, "singleton group size");
    uint32_t listed = 0;
    int64_t last_position = 0;
    for (RequestId id = g.head; id != kNoRequest; id = requests_[id].next) {
      const Request& r = requests_[id];
      FEATHER_CHECK(r.state == State::kWaiting && r.group == slot, "list member");
      FEATHER_CHECK(listed == 0 || r.position > last_position, "group FIFO out of order");
      last_position = r.position;
      ++listed;
    }
    FEATHER_CHECK(listed == g.waiting, "group list length");
    FEATHER_CHECK((g.heap_pos != kNil) == (g.waiting > 0), "heap membership");
    if (g.heap_pos != kNil) {
      ++in_heap;
      FEATHER_CHECK(heap_[g.heap_pos] == slot, "heap back-pointer");
      if (g.heap_pos > 0) FEATHER_CHECK(!Better(slot, heap_[(g.heap_pos - 1) / 2]), "heap order");
    }
  }
  FEATHER_CHECK(in_heap == heap_.size(), "heap size");
}

}  // namespace feather
