// chunked_hash_tree.cc: the path-compressed Chunked Hash Tree (see chunked_hash_tree.h).
#include "cht/chunked_hash_tree.h"

#include <algorithm>
#include <functional>
#include <iterator>

#include "base/check.h"

namespace feather {
namespace {

constexpr int kSeqBits = 40;
constexpr uint64_t kSeqMask = (uint64_t{1} << kSeqBits) - 1;

uint64_t HeapKey(uint32_t miss, uint64_t seq) {
  return (uint64_t{miss} << kSeqBits) | (seq & kSeqMask);
}

// A 4-ary min-heap on `key`: half the depth of a binary heap, and the four 16-byte children of
// a node share one cache line, so FindBest's pops touch ~log4(W) lines.
template <typename Entry>
void SiftUp(std::vector<Entry>& heap, size_t i) {
  const Entry moving = heap[i];
  while (i > 0) {
    const size_t parent = (i - 1) / 4;
    if (heap[parent].key <= moving.key) break;
    heap[i] = heap[parent];
    i = parent;
  }
  heap[i] = moving;
}

template <typename Entry>
void SiftDown(std::vector<Entry>& heap, size_t i) {
  const Entry moving = heap[i];
  const size_t n = heap.size();
  for (;;) {
    const size_t first = 4 * i + 1;
    if (first >= n) break;
    size_t best = first;
    const size_t last = std::min(first + 4, n);
    for (size_t c = first + 1; c < last; ++c) {
      if (heap[c].key < heap[best].key) best = c;
    }
    if (heap[best].key >= moving.key) break;
    heap[i] = heap[best];
    i = best;
  }
  heap[i] = moving;
}

template <typename Entry>
void PopTop(std::vector<Entry>& heap) {
  heap.front() = heap.back();
  heap.pop_back();
  if (!heap.empty()) SiftDown(heap, 0);
}

template <typename Entry>
void MakeHeap(std::vector<Entry>& heap) {
  if (heap.size() < 2) return;
  for (size_t i = (heap.size() - 2) / 4 + 1; i-- > 0;) SiftDown(heap, i);
}

}  // namespace

ChunkedHashTree::ChunkedHashTree(const ChtConfig& config)
    : config_(config), chunk_to_node_(config.expected_chunks) {
  FEATHER_CHECK(config_.chunk_tokens > 0, "chunk_tokens must be positive");
  requests_.reserve(config_.expected_requests);
  hashes_.reserve(config_.expected_requests);
  nodes_.reserve(config_.expected_requests + 16);
  waiters_.reserve(config_.expected_requests + 16);
  heap_.reserve(size_t{config_.expected_requests} * 4);
  dirty_.reserve(config_.expected_requests);
  active_ids_.reserve(config_.expected_requests);
  // Node 0 is the root: level 0, shared by every request, never in the working set's accounting.
  nodes_.push_back(Node{});
  nodes_[kRoot].parent = kNoNode;
  waiters_.emplace_back();
}

// ---------------------------------------------------------------------------------------------
// Small helpers.

ChunkedHashTree::RequestSlot& ChunkedHashTree::SlotFor(RequestId id) {
  if (id >= requests_.size()) {
    requests_.resize(size_t{id} + 1);
    hashes_.resize(size_t{id} + 1);
    active_position_.resize(size_t{id} + 1, 0);
  }
  return requests_[id];
}

bool ChunkedHashTree::IsWaiting(RequestId id) const {
  return id < requests_.size() && requests_[id].state == State::kWaiting;
}

bool ChunkedHashTree::IsActive(RequestId id) const {
  return id < requests_.size() && requests_[id].state == State::kActive;
}

uint32_t ChunkedHashTree::MissingCount(RequestId id) const {
  FEATHER_DCHECK(IsWaiting(id), "MissingCount of a request that is not waiting");
  return requests_[id].miss;
}

uint32_t ChunkedHashTree::NumChunksOf(RequestId id) const {
  return static_cast<uint32_t>(hashes_[id].size());
}

uint32_t ChunkedHashTree::NewNode() {
  if (!free_nodes_.empty()) {
    const uint32_t node = free_nodes_.back();
    free_nodes_.pop_back();
    nodes_[node] = Node{};
    return node;
  }
  nodes_.push_back(Node{});
  waiters_.emplace_back();
  return static_cast<uint32_t>(nodes_.size() - 1);
}

void ChunkedHashTree::LinkChild(uint32_t parent, uint32_t child) {
  Node& p = nodes_[parent];
  Node& c = nodes_[child];
  c.parent = parent;
  c.prev_sibling = kNoNode;
  c.next_sibling = p.first_child;
  if (p.first_child != kNoNode) nodes_[p.first_child].prev_sibling = child;
  p.first_child = child;
  ++p.children;
}

void ChunkedHashTree::UnlinkChild(uint32_t child) {
  Node& c = nodes_[child];
  Node& p = nodes_[c.parent];
  if (c.prev_sibling != kNoNode) {
    nodes_[c.prev_sibling].next_sibling = c.next_sibling;
  } else {
    p.first_child = c.next_sibling;
  }
  if (c.next_sibling != kNoNode) nodes_[c.next_sibling].prev_sibling = c.prev_sibling;
  --p.children;
  c.prev_sibling = c.next_sibling = kNoNode;
}

// `new_child` takes `old_child`'s place (parent and sibling links) in the parent's child list.
void ChunkedHashTree::ReplaceChild(uint32_t old_child, uint32_t new_child) {
  Node& o = nodes_[old_child];
  Node& n = nodes_[new_child];
  n.parent = o.parent;
  n.prev_sibling = o.prev_sibling;
  n.next_sibling = o.next_sibling;
  if (o.prev_sibling != kNoNode) {
    nodes_[o.prev_sibling].next_sibling = new_child;
  } else {
    nodes_[o.parent].first_child = new_child;
  }
  if (o.next_sibling != kNoNode) nodes_[o.next_sibling].prev_sibling = new_child;
  o.prev_sibling = o.next_sibling = kNoNode;
}

bool ChunkedHashTree::IsCurrent(const HeapEntry& entry) const {
  const RequestSlot& slot = requests_[entry.id];
  return slot.state == State::kWaiting && slot.epoch == entry.epoch &&
         (entry.key >> kSeqBits) == slot.miss;
}

void ChunkedHashTree::PushHeap(RequestId id) {
  const RequestSlot& slot = requests_[id];
  heap_.push_back(HeapEntry{HeapKey(slot.miss, slot.seq), id, slot.epoch});
  SiftUp(heap_, heap_.size() - 1);
}

// Lazy deletion lets stale entries pile up; rebuilding once they outnumber the live ones keeps
// the heap and the run O(W) in size at O(1) amortized cost per push.
void ChunkedHashTree::CompactHeap() {
  if (heap_.size() + (run_.size() - run_head_) <= 2 * num_waiting_ + 64) return;
  const auto stale = [this](const HeapEntry& e) { return !IsCurrent(e); };
  heap_.erase(std::remove_if(heap_.begin(), heap_.end(), stale), heap_.end());
  MakeHeap(heap_);
  // Several current entries of one request may remain (equal miss pushed twice); they are valid
  // proposals and rare. The run stays sorted under filtering.
  run_.erase(run_.begin(), run_.begin() + static_cast<std::ptrdiff_t>(run_head_));
  run_.erase(std::remove_if(run_.begin(), run_.end(), stale), run_.end());
  run_head_ = 0;
}

// Many requests re-priced at once (their node entered or left the working set). They come from
// one waiters list, appended in insertion order, so their new keys are usually already sorted:
// merging them into the run is O(k) where k sift-ups would cost O(k log W).
void ChunkedHashTree::AppendSortedRun() {
  fresh_.clear();
  for (RequestId id : dirty_) {
    const RequestSlot& slot = requests_[id];
    if (slot.state == State::kWaiting) {
      fresh_.push_back(HeapEntry{HeapKey(slot.miss, slot.seq), id, slot.epoch});
    }
  }
  const auto by_key = [](const HeapEntry& a, const HeapEntry& b) { return a.key < b.key; };
  if (!std::is_sorted(fresh_.begin(), fresh_.end(), by_key)) {
    std::sort(fresh_.begin(), fresh_.end(), by_key);
  }
  run_scratch_.clear();
  std::merge(run_.begin() + static_cast<std::ptrdiff_t>(run_head_), run_.end(), fresh_.begin(),
             fresh_.end(), std::back_inserter(run_scratch_), by_key);
  run_.swap(run_scratch_);
  run_head_ = 0;
}

void ChunkedHashTree::PushDirty() {
  if (dirty_.size() >= config_.sorted_run_threshold) {
    AppendSortedRun();
  } else {
    for (RequestId id : dirty_) {
      if (requests_[id].state == State::kWaiting) PushHeap(id);
    }
  }
  for (RequestId id : dirty_) requests_[id].dirty = false;
  dirty_.clear();
  CompactHeap();
}

void ChunkedHashTree::AddWaiter(uint32_t node, RequestId id) {
  std::vector<Waiter>& list = waiters_[node];
  // Entries of admitted or removed requests are dropped lazily; compact when they dominate.
  if (list.size() >= 2 * size_t{nodes_[node].waiting} + 8) CompactWaiters(node);
  list.push_back(Waiter{id, requests_[id].epoch});
}

void ChunkedHashTree::CompactWaiters(uint32_t node) {
  std::vector<Waiter>& list = waiters_[node];
  list.erase(std::remove_if(list.begin(), list.end(),
                            [this](const Waiter& w) {
                              const RequestSlot& s = requests_[w.id];
                              return s.state != State::kWaiting || s.epoch != w.epoch;
                            }),
             list.end());
}

// The node's chunks joined (entering = true) or left the working set: every waiting request
// through it misses Length() fewer (or more) chunks. Stale entries are dropped in the same pass;
// a node with no waiting request holds only stale entries, so its list is simply cleared.
void ChunkedHashTree::RepriceWaiters(uint32_t node, bool entering) {
  std::vector<Waiter>& list = waiters_[node];
  if (nodes_[node].waiting == 0) {
    list.clear();
    return;
  }
  const uint32_t length = nodes_[node].Length();
  size_t kept = 0;
  for (const Waiter& w : list) {
    RequestSlot& s = requests_[w.id];
    if (s.state != State::kWaiting || s.epoch != w.epoch) continue;
    list[kept++] = w;
    s.miss = entering ? s.miss - length : s.miss + length;
    if (!s.dirty) {
      s.dirty = true;
      dirty_.push_back(w.id);
    }
  }
  list.resize(kept);
}

uint32_t ChunkedHashTree::DeepestActiveAncestor(uint32_t node) const {
  while (node != kRoot && nodes_[node].active == 0) node = nodes_[node].parent;
  return node;
}

// ---------------------------------------------------------------------------------------------
// Insert.

void ChunkedHashTree::Insert(RequestId id, std::span<const Token> tokens) {
  RequestSlot& slot = SlotFor(id);
  FEATHER_CHECK(slot.state == State::kAbsent, "Insert of a request id already present");
  ComputePrefixHashes(config_.hash_scheme, tokens, config_.chunk_tokens, hashes_[id]);
  InsertPrepared(id);
}

void ChunkedHashTree::InsertHashes(RequestId id, std::span<const PrefixHash> hashes) {
  RequestSlot& slot = SlotFor(id);
  FEATHER_CHECK(slot.state == State::kAbsent, "InsertHashes of a request id already present");
  hashes_[id].assign(hashes.begin(), hashes.end());
  InsertPrepared(id);
}

// Levels present in the table are prefix-closed (a present level implies all shallower levels of
// the same prompt are present), so the deepest shared level is found by binary search.
uint32_t ChunkedHashTree::DeepestExistingLevel(std::span<const PrefixHash> hashes) const {
  uint32_t lo = 0;  // known present (level 0 = root)
  auto hi = static_cast<uint32_t>(hashes.size());
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo + 1) / 2;
    if (chunk_to_node_.Contains(ChunkKey{hashes[mid - 1], mid})) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Splits `node` so that a node ends exactly at `cut_level` (start <= cut_level < end). The new
// upper part takes the node's place under its parent; `node` keeps its id and lower range, so
// anything pointing at the deeper levels (request leaves, the tip) stays valid.
uint32_t ChunkedHashTree::SplitNode(uint32_t node, uint32_t cut_level,
                                    std::span<const PrefixHash> hashes) {
  const uint32_t upper = NewNode();
  Node& lower = nodes_[node];
  Node& up = nodes_[upper];
  up.start = lower.start;
  up.end = cut_level;
  up.members = lower.members;
  up.active = lower.active;
  up.waiting = lower.waiting;
  lower.start = cut_level + 1;
  ReplaceChild(node, upper);
  LinkChild(upper, node);
  CompactWaiters(node);
  waiters_[upper].assign(waiters_[node].begin(), waiters_[node].end());
  for (uint32_t level = up.start; level <= cut_level; ++level) {
    *chunk_to_node_.Find(ChunkKey{hashes[level - 1], level}) = upper;
  }
  return upper;
}

void ChunkedHashTree::InsertPrepared(RequestId id) {
  RequestSlot& slot = requests_[id];
  const std::span<const PrefixHash> hashes(hashes_[id]);
  const auto chunks = static_cast<uint32_t>(hashes.size());
  const uint32_t shared = DeepestExistingLevel(hashes);

  uint32_t attach = kRoot;
  if (shared > 0) {
    attach = *chunk_to_node_.Find(ChunkKey{hashes[shared - 1], shared});
    if (nodes_[attach].end > shared) attach = SplitNode(attach, shared, hashes);
  }
  uint32_t leaf = attach;
  if (chunks > shared) {
    leaf = NewNode();
    nodes_[leaf].start = shared + 1;
    nodes_[leaf].end = chunks;
    LinkChild(attach, leaf);
    for (uint32_t level = shared + 1; level <= chunks; ++level) {
      chunk_to_node_.Insert(ChunkKey{hashes[level - 1], level}, leaf);
    }
  }
  slot.leaf = leaf;
  slot.seq = next_seq_++;
  ++nodes_[leaf].terminals;
  for (uint32_t n = leaf; n != kRoot; n = nodes_[n].parent) ++nodes_[n].members;
  AttachAsWaiting(id);
  cache_valid_ = false;
}

// Marks the request waiting on every node of its path and computes its missing count.
void ChunkedHashTree::AttachAsWaiting(RequestId id) {
  RequestSlot& slot = requests_[id];
  slot.state = State::kWaiting;
  uint32_t miss = 0;
  for (uint32_t n = slot.leaf; n != kRoot; n = nodes_[n].parent) {
    Node& node = nodes_[n];
    ++node.waiting;
    if (node.active == 0) miss += node.Length();
    AddWaiter(n, id);
  }
  slot.miss = miss;
  ++num_waiting_;
  PushHeap(id);
  CompactHeap();
}

// ---------------------------------------------------------------------------------------------
// FindBest.

std::optional<ChtCandidate> ChunkedHashTree::FindBest() {
  if (num_waiting_ == 0) return std::nullopt;
  if (cache_valid_) return cached_best_;
  while (!heap_.empty() && !IsCurrent(heap_.front())) PopTop(heap_);
  while (run_head_ < run_.size() && !IsCurrent(run_[run_head_])) ++run_head_;
  if (run_head_ == run_.size()) {
    run_.clear();
    run_head_ = 0;
  }
  const bool from_run =
      run_head_ < run_.size() && (heap_.empty() || run_[run_head_].key < heap_.front().key);
  FEATHER_CHECK(from_run || !heap_.empty(), "waiting requests but no current heap entry");
  const RequestId best = from_run ? run_[run_head_].id : heap_.front().id;
  const RequestSlot& slot = requests_[best];

  ChtCandidate result;
  result.request = best;
  result.tip_before = tip_level_;
  result.missing = slot.miss;
  if (!active_ids_.empty()) {
    // The working-set part of the candidate's path is prefix-closed; at levels <= tip it can
    // only be the tip chain, so the new tip is min(tip, deepest working-set level on the path).
    const uint32_t deepest = DeepestActiveAncestor(slot.leaf);
    const uint32_t deepest_end = deepest == kRoot ? 0 : nodes_[deepest].end;
    if (deepest_end <= tip_level_) {
      result.tip_after = deepest_end;
      result.peers = deepest == kRoot ? static_cast<uint32_t>(num_waiting_)
                                      : nodes_[deepest].waiting;
    } else {
      result.tip_after = tip_level_;
      result.peers = tip_node_ == kRoot ? static_cast<uint32_t>(num_waiting_)
                                        : nodes_[tip_node_].waiting;
    }
  } else {
    result.peers = static_cast<uint32_t>(num_waiting_);
  }
  cached_best_ = result;
  cache_valid_ = true;
  return result;
}

// ---------------------------------------------------------------------------------------------
// AddToBatch.

void ChunkedHashTree::AddToBatch(RequestId id) {
  FEATHER_CHECK(IsWaiting(id), "AddToBatch of a request that is not waiting");
  RequestSlot& slot = requests_[id];
  // New tip first, from the working set as it was before this request joins it.
  if (active_ids_.empty()) {
    tip_level_ = static_cast<uint32_t>(hashes_[id].size());
    tip_node_ = slot.leaf;
  } else {
    const uint32_t deepest = DeepestActiveAncestor(slot.leaf);
    const uint32_t deepest_end = deepest == kRoot ? 0 : nodes_[deepest].end;
    if (deepest_end <= tip_level_) {
      tip_level_ = deepest_end;
      tip_node_ = deepest;
    }
  }
  slot.state = State::kActive;
  ++slot.epoch;
  --num_waiting_;
  for (uint32_t n = slot.leaf; n != kRoot; n = nodes_[n].parent) {
    Node& node = nodes_[n];
    --node.waiting;
    if (node.active++ == 0) RepriceWaiters(n, /*entering=*/true);
  }
  active_position_[id] = static_cast<uint32_t>(active_ids_.size());
  active_ids_.push_back(id);
  PushDirty();
  cache_valid_ = false;
}

// ---------------------------------------------------------------------------------------------
// Finish, Requeue, Remove.

// Takes an active request out of the working set and the active list and re-extends the tip.
void ChunkedHashTree::LeaveActive(RequestId id) {
  FEATHER_CHECK(IsActive(id), "request is not active");
  RequestSlot& slot = requests_[id];
  for (uint32_t n = slot.leaf; n != kRoot; n = nodes_[n].parent) {
    if (--nodes_[n].active == 0) RepriceWaiters(n, /*entering=*/false);
  }
  const uint32_t position = active_position_[id];
  const RequestId moved = active_ids_.back();
  active_ids_[position] = moved;
  active_position_[moved] = position;
  active_ids_.pop_back();
  slot.state = State::kAbsent;
  ExtendTip();
}

// A completion can only lengthen the common prefix of the remaining active requests: walk down
// the path of any one of them from the old tip while every active request agrees.
void ChunkedHashTree::ExtendTip() {
  if (active_ids_.empty()) {
    tip_level_ = 0;
    tip_node_ = kRoot;
    return;
  }
  const auto count = static_cast<uint32_t>(active_ids_.size());
  path_.clear();
  for (uint32_t n = requests_[active_ids_.front()].leaf; n != tip_node_; n = nodes_[n].parent) {
    FEATHER_DCHECK(n != kRoot, "tip node is not on an active request's path");
    path_.push_back(n);
  }
  while (!path_.empty() && nodes_[path_.back()].active == count) {
    tip_node_ = path_.back();
    tip_level_ = nodes_[tip_node_].end;
    path_.pop_back();
  }
}

void ChunkedHashTree::Finish(RequestId id) {
  LeaveActive(id);
  DetachFromTree(id);
  PushDirty();
  cache_valid_ = false;
}

void ChunkedHashTree::Requeue(RequestId id) {
  LeaveActive(id);
  AttachAsWaiting(id);
  PushDirty();
  cache_valid_ = false;
}

void ChunkedHashTree::Remove(RequestId id) {
  FEATHER_CHECK(IsWaiting(id), "Remove of a request that is not waiting");
  RequestSlot& slot = requests_[id];
  slot.state = State::kAbsent;
  ++slot.epoch;
  --num_waiting_;
  for (uint32_t n = slot.leaf; n != kRoot; n = nodes_[n].parent) --nodes_[n].waiting;
  DetachFromTree(id);
  cache_valid_ = false;
}

// Drops the request from the node structure: nodes no request passes through any more are freed
// (they form the bottom of its path), and a surviving parent left with a single child and no
// request ending in it is merged into that child, so stretches stay maximal.
void ChunkedHashTree::DetachFromTree(RequestId id) {
  RequestSlot& slot = requests_[id];
  const std::span<const PrefixHash> hashes(hashes_[id]);
  --nodes_[slot.leaf].terminals;
  uint32_t n = slot.leaf;
  for (uint32_t m = n; m != kRoot; m = nodes_[m].parent) --nodes_[m].members;
  while (n != kRoot && nodes_[n].members == 0) {
    const uint32_t parent = nodes_[n].parent;
    FreeNode(n, hashes);
    n = parent;
  }
  if (n != kRoot && nodes_[n].children == 1 && nodes_[n].terminals == 0) {
    MergeIntoOnlyChild(n, hashes);
  }
  ++slot.epoch;
  slot.leaf = kRoot;
}

void ChunkedHashTree::FreeNode(uint32_t node, std::span<const PrefixHash> hashes) {
  const Node& dying = nodes_[node];
  FEATHER_DCHECK(dying.children == 0 && dying.active == 0 && dying.waiting == 0,
                 "freeing a node still in use");
  for (uint32_t level = dying.start; level <= dying.end; ++level) {
    chunk_to_node_.Erase(ChunkKey{hashes[level - 1], level});
  }
  UnlinkChild(node);
  waiters_[node].clear();
  free_nodes_.push_back(node);
}

void ChunkedHashTree::MergeIntoOnlyChild(uint32_t node, std::span<const PrefixHash> hashes) {
  const uint32_t child = nodes_[node].first_child;
  FEATHER_DCHECK(tip_node_ != node, "merging away the tip node");
  Node& upper = nodes_[node];
  for (uint32_t level = upper.start; level <= upper.end; ++level) {
    *chunk_to_node_.Find(ChunkKey{hashes[level - 1], level}) = child;
  }
  nodes_[child].start = upper.start;
  upper.first_child = kNoNode;
  upper.children = 0;
  ReplaceChild(node, child);
  waiters_[node].clear();
  free_nodes_.push_back(node);
}

// ---------------------------------------------------------------------------------------------
// Accounting and self-checks.

size_t ChunkedHashTree::MemoryBytes() const {
  size_t bytes = sizeof(*this) + chunk_to_node_.MemoryBytes();
  bytes += requests_.capacity() * sizeof(RequestSlot) + active_position_.capacity() * 4;
  bytes += hashes_.capacity() * sizeof(hashes_[0]);
  for (const auto& hashes : hashes_) bytes += hashes.capacity() * sizeof(PrefixHash);
  bytes += nodes_.capacity() * sizeof(Node) + waiters_.capacity() * sizeof(waiters_[0]);
  for (const auto& list : waiters_) bytes += list.capacity() * sizeof(Waiter);
  bytes += free_nodes_.capacity() * 4 + heap_.capacity() * sizeof(HeapEntry);
  bytes += (run_.capacity() + run_scratch_.capacity() + fresh_.capacity()) * sizeof(HeapEntry);
  bytes += dirty_.capacity() * 4 + active_ids_.capacity() * 4 + path_.capacity() * 4;
  return bytes;
}

void ChunkedHashTree::CheckInvariants() const {
  std::vector<Node> expect(nodes_.size());
  std::vector<uint8_t> is_free(nodes_.size(), 0);
  for (uint32_t f : free_nodes_) is_free[f] = 1;
  size_t waiting = 0;
  for (RequestId id = 0; id < requests_.size(); ++id) {
    const RequestSlot& slot = requests_[id];
    if (slot.state == State::kAbsent) continue;
    const auto& hashes = hashes_[id];
    const auto chunks = static_cast<uint32_t>(hashes.size());
    FEATHER_CHECK(slot.leaf == kRoot ? chunks == 0 : nodes_[slot.leaf].end == chunks,
                  "request does not end at its leaf's end");
    ++expect[slot.leaf].terminals;
    uint32_t miss = 0;
    for (uint32_t n = slot.leaf; n != kRoot; n = nodes_[n].parent) {
      FEATHER_CHECK(!is_free[n], "request path through a freed node");
      ++expect[n].members;
      if (slot.state == State::kActive) ++expect[n].active;
      if (slot.state == State::kWaiting) ++expect[n].waiting;
      for (uint32_t level = nodes_[n].start; level <= nodes_[n].end; ++level) {
        const uint32_t* mapped = chunk_to_node_.Find(ChunkKey{hashes[level - 1], level});
        FEATHER_CHECK(mapped != nullptr && *mapped == n, "chunk table disagrees with a path");
      }
      if (nodes_[n].active == 0) miss += nodes_[n].Length();
    }
    if (slot.state == State::kWaiting) {
      ++waiting;
      FEATHER_CHECK(slot.miss == miss, "stale missing count");
    }
  }
  FEATHER_CHECK(waiting == num_waiting_, "waiting count");
  size_t chunks_in_nodes = 0;
  for (uint32_t n = 1; n < nodes_.size(); ++n) {
    if (is_free[n]) continue;
    const Node& node = nodes_[n];
    FEATHER_CHECK(node.members == expect[n].members && node.active == expect[n].active &&
                      node.waiting == expect[n].waiting &&
                      node.terminals == expect[n].terminals,
                  "node counts disagree with a recount");
    FEATHER_CHECK(node.members > 0, "live node without members");
    FEATHER_CHECK(node.children != 1 || node.terminals > 0, "non-maximal node (mergeable)");
    uint32_t children = 0;
    for (uint32_t c = node.first_child; c != kNoNode; c = nodes_[c].next_sibling) {
      FEATHER_CHECK(nodes_[c].parent == n && nodes_[c].start == node.end + 1, "child link");
      ++children;
    }
    FEATHER_CHECK(children == node.children, "child count");
    chunks_in_nodes += node.Length();
  }
  FEATHER_CHECK(chunks_in_nodes == chunk_to_node_.size(), "chunk table holds foreign entries");
  const auto count = static_cast<uint32_t>(active_ids_.size());
  if (count == 0) {
    FEATHER_CHECK(tip_level_ == 0, "tip of an empty batch");
  } else {
    FEATHER_CHECK(tip_node_ == kRoot ? tip_level_ == 0 : nodes_[tip_node_].end == tip_level_,
                  "tip node and level disagree");
    FEATHER_CHECK(tip_node_ == kRoot || nodes_[tip_node_].active == count,
                  "tip not shared by every active request");
  }
}

}  // namespace feather
