// chunked_hash_tree.cc: the path-compressed Chunked Hash Tree and its tournament (see
// chunked_hash_tree.h).
#include "cht/chunked_hash_tree.h"

#include <algorithm>
#include <initializer_list>

#include "base/check.h"

namespace feather {
namespace {

using cht_internal::kSeqBits;
constexpr uint64_t kSeqMask = (uint64_t{1} << kSeqBits) - 1;
constexpr uint32_t kPrefetchAhead = 8;  // run entries ahead whose nodes RefreshBest fetches
                                        // (and half as far: their request slots)

// (chunks, insertion order) as one integer; a node's best minus end << kSeqBits is
// (missing count, insertion order).
uint64_t StaticKey(uint32_t chunks, uint64_t seq) {
  return (uint64_t{chunks} << kSeqBits) | (seq & kSeqMask);
}

// A 4-ary min-heap on `key`: half the depth of a binary heap, and the four 16-byte children of
// a node share one cache line.
template <typename Entry>
[[gnu::always_inline]] inline void SiftUp(std::vector<Entry>& heap, size_t i) {
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
[[gnu::always_inline]] inline void SiftDown(std::vector<Entry>& heap, size_t i) {
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
  queues_.reserve(config_.expected_requests + 16);
  global_.reserve(64);
  active_ids_.reserve(config_.expected_requests);
  // Node 0 is the root: level 0, shared by every request, never in the working set's accounting,
  // and always an owner (its best sits in the global heap).
  nodes_.push_back(Node{});
  nodes_[kRoot].parent = kNoNode;
  queues_.emplace_back();
}

// ---------------------------------------------------------------------------------------------
// Small helpers.

ChunkedHashTree::RequestSlot& ChunkedHashTree::SlotFor(RequestId id) {
  FEATHER_CHECK(id < kRequestBit, "request ids must be below 2^31");
  if (id >= requests_.size()) {
    requests_.resize(size_t{id} + 1);
    hashes_.resize(size_t{id} + 1);
    shared_of_.resize(size_t{id} + 1, kNoShared);
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

bool ChunkedHashTree::IsParked(RequestId id) const {
  return id < requests_.size() && requests_[id].state == State::kParked;
}

bool ChunkedHashTree::IsRetained(RequestId id) const {
  return id < requests_.size() && requests_[id].state == State::kRetained;
}

// Active nodes are closed upwards, so the missing chunks are those below the deepest active
// ancestor.
uint32_t ChunkedHashTree::MissingCount(RequestId id) const {
  FEATHER_DCHECK(IsWaiting(id), "MissingCount of a request that is not waiting");
  return NumChunksOf(id) - nodes_[DeepestActiveAncestor(requests_[id].leaf)].end;
}

uint32_t ChunkedHashTree::NumChunksOf(RequestId id) const {
  return static_cast<uint32_t>(HashesOf(id).size());
}

uint32_t ChunkedHashTree::LevelSharedByAll() const {
  uint32_t n = kRoot;
  // One step in a tree of maximal stretches; the loop also states what "shared by all" means.
  while (nodes_[n].children == 1 && nodes_[n].terminals == 0) n = nodes_[n].first_child;
  return n == kRoot ? 0 : nodes_[n].end;
}

// A reused node keeps (and advances) its stamp, so entries pushed for its previous life stay
// stale.
uint32_t ChunkedHashTree::NewNode() {
  if (!free_nodes_.empty()) {
    const uint32_t node = free_nodes_.back();
    free_nodes_.pop_back();
    const uint32_t stamp = nodes_[node].stamp;
    nodes_[node] = Node{};
    nodes_[node].stamp = stamp + 1;
    return node;
  }
  nodes_.push_back(Node{});
  queues_.emplace_back();
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

uint32_t ChunkedHashTree::DeepestActiveAncestor(uint32_t node) const {
  while (node != kRoot && nodes_[node].active == 0) node = nodes_[node].parent;
  return node;
}

// ---------------------------------------------------------------------------------------------
// The tournament (invariants I1-I3 in the header).

uint64_t ChunkedHashTree::TerminalKey(RequestId id) const {
  return StaticKey(NumChunksOf(id), requests_[id].seq);
}

[[gnu::always_inline]] inline bool ChunkedHashTree::IsCurrent(const Entry& entry) const {
  if (entry.ref & kRequestBit) {
    const RequestSlot& slot = requests_[entry.ref & ~kRequestBit];
    return slot.state == State::kWaiting && slot.epoch == entry.stamp;
  }
  return IsCurrentNode(entry);
}

// Advances a run's head past its stale entries; returns the new head.
[[gnu::always_inline]] inline uint32_t ChunkedHashTree::DropStaleFront(Run& run) const {
  uint32_t head = run.head;
  while (head < run.entries.size() && !IsCurrent(run.entries[head])) ++head;
  run.head = head;
  return head;
}

// Appends `entry` if the run is drained or ends at or below its key; returns whether it did.
[[gnu::always_inline]] inline bool ChunkedHashTree::Run::TryAppend(const Entry& entry) {
  if (head == entries.size()) {
    entries.clear();
    head = 0;
  } else if (entries.back().key > entry.key) {
    return false;
  }
  entries.push_back(entry);
  return true;
}

// Pushes in key order (the common case: requests arrive in insertion order and, in one group,
// with equal lengths) append to the first run; an ascending sequence that starts below its back
// (requests requeued in the order they were admitted, all ahead of the group's remaining
// waiters) to the second; others go to the heap.
void ChunkedHashTree::PushQueue(uint32_t node, const Entry& entry) {
  Queue& q = queues_[node];
  // Stale entries at the run's front are dropped here as well as when the front is read, so a
  // round opening on a cold tree does not walk them (each is a cold node line).
  for (Run* run : {&q.run, &q.run2}) DropStaleFront(*run);
  if (!q.run.TryAppend(entry) && !q.run2.TryAppend(entry)) {
    q.heap.push_back(entry);
    SiftUp(q.heap, q.heap.size() - 1);
  }
  // At most one current entry per child and per terminal (I2, I3): rebuild once stale entries
  // dominate, O(1) amortized per push.
  const Node& n = nodes_[node];
  if (q.heap.size() + q.run.Live() + q.run2.Live() > 2 * size_t{n.children + n.terminals} + 8) {
    CompactQueue(node);
  }
}

void ChunkedHashTree::CompactQueue(uint32_t node) {
  Queue& q = queues_[node];
  const auto stale = [this](const Entry& e) { return !IsCurrent(e); };
  q.heap.erase(std::remove_if(q.heap.begin(), q.heap.end(), stale), q.heap.end());
  MakeHeap(q.heap);
  for (Run* run : {&q.run, &q.run2}) {
    std::vector<Entry>& e = run->entries;
    e.erase(e.begin(), e.begin() + run->head);
    e.erase(std::remove_if(e.begin(), e.end(), stale), e.end());
    run->head = 0;
  }
}

// Re-derives best(node) from its queue (I1), dropping stale entries at the fronts. Returns
// whether it changed; keys are unique (they carry the insertion order), so an unchanged key is
// an unchanged request.
[[gnu::always_inline]] inline bool ChunkedHashTree::RefreshBest(uint32_t node) {
  Node& n = nodes_[node];
  if ((node == kRoot ? num_waiting_ : n.waiting) == 0) {
    // Nothing waits below: every entry is stale, and they stay stale (stamps and epochs only
    // move forward), so the queue is not even read (an admitted leaf's queue is a cold line).
    if (n.best_key == kNoKey) return false;
    n.best_key = kNoKey;
    n.best = kNoRequest;
    return true;
  }
  Queue& q = queues_[node];
  const Entry* front = nullptr;
  {
    std::vector<Entry>& e = q.run.entries;
    const uint32_t head = DropStaleFront(q.run);
    if (head < e.size()) {
      front = &e[head];
      // Admissions walk a run front to back and read each entry's node (and then its best
      // request): fetch a few entries ahead, so the walk does not wait on memory each step.
      // Two stages: the node of the entry kPrefetchAhead ahead, and the request slot of the one
      // half as far ahead, read off its node, which the first stage fetched a few admissions
      // earlier (so that load does not wait). Fetching the slot through a cold node in one step
      // cost more than it hid; the two stages took the round from 24-29 to 19-20 us
      // (cht/README.md).
      if (head + kPrefetchAhead < e.size()) {
        const uint32_t ahead = e[head + kPrefetchAhead].ref;
        if (!(ahead & kRequestBit)) __builtin_prefetch(&nodes_[ahead]);
        const uint32_t near = e[head + kPrefetchAhead / 2].ref;
        if (!(near & kRequestBit)) {
          const RequestId best = nodes_[near].best;  // kNoRequest at a stale entry's node
          if (best != kNoRequest) __builtin_prefetch(requests_.data() + best);
        }
      }
    }
  }
  if (q.run2.Live() > 0) {  // empty unless requests were requeued out of order
    std::vector<Entry>& e = q.run2.entries;
    const uint32_t head = DropStaleFront(q.run2);
    if (head < e.size() && (front == nullptr || e[head].key < front->key)) front = &e[head];
  }
  while (!q.heap.empty() && !IsCurrent(q.heap.front())) PopTop(q.heap);
  if (!q.heap.empty() && (front == nullptr || q.heap.front().key < front->key)) {
    front = &q.heap.front();
  }
  const uint64_t key = front == nullptr ? kNoKey : front->key;
  if (key == n.best_key) return false;
  n.best_key = key;
  if (front == nullptr) {
    n.best = kNoRequest;
  } else {
    n.best = (front->ref & kRequestBit) ? front->ref & ~kRequestBit : nodes_[front->ref].best;
    __builtin_prefetch(&requests_[n.best]);  // AddToBatch of the new best usually follows
  }
  return true;
}

// The node's best, activity or parent changed: retire its current entry (I2) and push the new
// one where it belongs.
[[gnu::always_inline]] inline void ChunkedHashTree::Publish(uint32_t node) {
  Node& n = nodes_[node];
  ++n.stamp;
  if (n.best_key == kNoKey) return;
  if (node == kRoot || n.active > 0) {
    PushGlobal(Entry{n.best_key - (uint64_t{n.end} << kSeqBits), node, n.stamp});
  } else {
    PushQueue(n.parent, Entry{n.best_key, node, n.stamp});
  }
}

[[gnu::always_inline]] inline void ChunkedHashTree::PushGlobal(const Entry& entry) {
  // An owner re-published after its top request was admitted usually is the stale top itself:
  // overwrite it in place.
  if (!global_.empty() && global_.front().ref == entry.ref) {
    global_.front() = entry;
    SiftDown(global_, 0);
    return;
  }
  global_.push_back(entry);
  SiftUp(global_, global_.size() - 1);
  // Current entries: at most one per active node and the root (I2). Rebuilding once stale ones
  // outnumber them keeps the heap (and every sift from its top) as small as the working set's
  // node count, not the tree's: O(1) amortized per push.
  if (global_.size() > 2 * size_t{active_nodes_} + 16) {
    const auto stale = [this](const Entry& e) { return !IsCurrent(e); };
    global_.erase(std::remove_if(global_.begin(), global_.end(), stale), global_.end());
    MakeHeap(global_);
  }
}

// Restores I1/I2 after an operation on one request's path: `from`'s queue (or activity)
// changed, and the nodes from `from` up to `segment_top` (kNoNode: none) changed activity. Every
// node whose best or activity changed publishes; the walk goes on while the parent's queue saw
// it (the node was or is inactive) and stops at the first node with nothing to publish.
void ChunkedHashTree::Repair(uint32_t from, uint32_t segment_top) {
  bool in_segment = segment_top != kNoNode;
  for (uint32_t n = from;;) {
    const bool moved = in_segment;
    if (n == segment_top) in_segment = false;
    const bool changed = RefreshBest(n);
    if (!changed && !moved) return;
    Publish(n);
    if (n == kRoot || (!moved && nodes_[n].active > 0)) return;
    n = nodes_[n].parent;
  }
}

// ---------------------------------------------------------------------------------------------
// Insert.

void ChunkedHashTree::Insert(RequestId id, PromptView tokens) {
  RequestSlot& slot = SlotFor(id);
  FEATHER_CHECK(slot.state == State::kAbsent, "Insert of a request id already present");
  const uint32_t k = static_cast<uint32_t>(tokens.head().size() / config_.chunk_tokens);
  const uint64_t key = tokens.head_key();
  if (key == 0 || k == 0 || key >= (uint64_t{1} << 40) || k >= (uint32_t{1} << 24)) {
    ComputePrefixHashes(config_.hash_scheme, tokens, config_.chunk_tokens, hashes_[id]);
  } else {
    const uint64_t memo_key = (key << 24) | k;
    auto [slot_index, inserted] = shared_index_.Insert(memo_key, kNoShared);
    if (inserted) {
      uint32_t s = 0;
      if (free_shared_.empty()) {
        s = static_cast<uint32_t>(shared_.size());
        shared_.emplace_back();
      } else {
        s = free_shared_.back();
        free_shared_.pop_back();
      }
      *slot_index = s;
      SharedHashes& entry = shared_[s];
      entry.memo_key = memo_key;
      PrefixHashesUpTo(config_.hash_scheme, tokens, config_.chunk_tokens, k, entry.hashes,
                       entry.resume);
    }
    const uint32_t s = *slot_index;
    ++shared_[s].refs;
    shared_of_[id] = s;
    PrefixHashesFrom(config_.hash_scheme, tokens, config_.chunk_tokens, k, shared_[s].resume,
                     hashes_[id]);
  }
  InsertPrepared(id);
}

void ChunkedHashTree::InsertHashes(RequestId id, std::span<const PrefixHash> hashes) {
  RequestSlot& slot = SlotFor(id);
  FEATHER_CHECK(slot.state == State::kAbsent, "InsertHashes of a request id already present");
  hashes_[id].assign(hashes.begin(), hashes.end());
  shared_of_[id] = kNoShared;
  InsertPrepared(id);
}

// Levels present in the table are prefix-closed (a present level implies all shallower levels of
// the same prompt are present), so the deepest shared level is found by binary search.
uint32_t ChunkedHashTree::DeepestExistingLevel(ChainView hashes) const {
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
// anything pointing at the deeper levels (request leaves, the tip) stays valid. The upper part
// owns nothing of its own yet: its best is the lower part's when that is inactive, and it
// publishes the same key its parent already holds, so no ancestor changes.
uint32_t ChunkedHashTree::SplitNode(uint32_t node, uint32_t cut_level, ChainView hashes) {
  const uint32_t upper = NewNode();
  Node& lower = nodes_[node];
  Node& up = nodes_[upper];
  up.start = lower.start;
  up.end = cut_level;
  up.members = lower.members;
  up.active = lower.active;
  up.batch = lower.batch;
  up.waiting = lower.waiting;
  if (lower.active == 0) {
    up.best_key = lower.best_key;
    up.best = lower.best;
  } else {
    ++active_nodes_;
  }
  lower.start = cut_level + 1;
  ReplaceChild(node, upper);
  LinkChild(upper, node);
  for (uint32_t level = up.start; level <= cut_level; ++level) {
    *chunk_to_node_.Find(ChunkKey{hashes[level - 1], level}) = upper;
  }
  Publish(node);   // into queue(upper), or the global heap again
  Publish(upper);  // replaces the lower part's entry in queue(parent)
  return upper;
}

void ChunkedHashTree::InsertPrepared(RequestId id) {
  RequestSlot& slot = requests_[id];
  const ChainView hashes = HashesOf(id);
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
  AttachAsWaiting(id, kNoNode);
  cache_valid_ = false;
}

// Marks the request waiting on every node of its path and enters it into its leaf's queue;
// `segment_top` as for Repair (a requeued request's path may just have left the working set).
void ChunkedHashTree::AttachAsWaiting(RequestId id, uint32_t segment_top) {
  RequestSlot& slot = requests_[id];
  slot.state = State::kWaiting;
  for (uint32_t n = slot.leaf; n != kRoot; n = nodes_[n].parent) ++nodes_[n].waiting;
  ++num_waiting_;
  PushQueue(slot.leaf, Entry{TerminalKey(id), id | kRequestBit, slot.epoch});
  Repair(slot.leaf, segment_top);
}

// ---------------------------------------------------------------------------------------------
// FindBest.

// FindBest (inline, in the header) found a stale top: pop stale entries until a current one
// surfaces (there is one while a request waits: I2).
void ChunkedHashTree::DropStaleGlobalTops() {
  while (!global_.empty() && !IsCurrent(global_.front())) PopTop(global_);
  FEATHER_CHECK(!global_.empty(), "waiting requests but no current global entry");
}

// ---------------------------------------------------------------------------------------------
// AddToBatch.

void ChunkedHashTree::AddToBatch(RequestId id) {
  FEATHER_CHECK(IsWaiting(id), "AddToBatch of a request that is not waiting");
  RequestSlot& slot = requests_[id];
  slot.state = State::kActive;
  ++slot.epoch;  // retires its terminal entry (I3)
  --num_waiting_;
  const uint32_t leaf = slot.leaf;
  Node& l = nodes_[leaf];
  const uint32_t parent = l.parent;  // kNoNode for the root
  // The round's common case: the request is the only one at an inactive leaf (so the leaf has no
  // children and owns just it) whose parent is already in the working set. What the general
  // path below does then, without its branches: the leaf alone enters the working set and owns
  // nothing any more, its entry in the parent's queue goes stale, and the parent (an owner, in
  // the global heap) re-derives its best.
  if (leaf != kRoot && l.waiting == 1 && l.active == 0 && parent != kRoot &&
      nodes_[parent].active > 0) {
    l.waiting = 0;
    l.active = 1;
    l.batch = 1;
    ++active_nodes_;
    ++l.stamp;  // Publish(leaf) of an empty best
    l.best_key = kNoKey;
    l.best = kNoRequest;
    uint32_t in_batch = kRoot;  // the deepest node of the path that already held batch members
    for (uint32_t n = parent; n != kRoot; n = nodes_[n].parent) {
      Node& node = nodes_[n];
      --node.waiting;
      ++node.active;
      if (in_batch == kRoot && node.batch > 0) in_batch = n;
      ++node.batch;
    }
    // The parent is in the working set; without retained requests it holds batch members.
    if (active_ids_.empty()) {
      tip_level_ = l.end;
      tip_node_ = leaf;
    } else if (nodes_[in_batch].end <= tip_level_) {
      tip_level_ = nodes_[in_batch].end;
      tip_node_ = in_batch;
    }
    if (RefreshBest(parent)) Publish(parent);
    active_position_[id] = static_cast<uint32_t>(active_ids_.size());
    active_ids_.push_back(id);
    cache_valid_ = false;
    return;
  }
  AddToBatchGeneral(id);
}

// AddToBatch's general case (the request's own state already updated), out of line so that the
// fast path saves and restores only the registers it uses.
void ChunkedHashTree::AddToBatchGeneral(RequestId id) {
  RequestSlot& slot = requests_[id];
  // One walk up the path: the nodes entering the working set are its bottom, up to segment_top;
  // the first node already in it is the deepest active ancestor (the root if none).
  uint32_t segment_top = kNoNode;
  uint32_t deepest = kRoot;
  uint32_t n = slot.leaf;
  for (; n != kRoot; n = nodes_[n].parent) {
    Node& node = nodes_[n];
    --node.waiting;
    if (node.active++ != 0) break;
    ++node.batch;  // was 0: outside the working set
    segment_top = n;
    ++active_nodes_;
  }
  // The deepest node of the path that already held batch members: `deepest` itself unless it is
  // in the working set through retained requests only.
  uint32_t in_batch = kRoot;
  if (n != kRoot) {
    deepest = n;
    for (; n != kRoot; n = nodes_[n].parent) {
      Node& node = nodes_[n];
      if (n != deepest) {
        --node.waiting;
        ++node.active;
      }
      if (in_batch == kRoot && node.batch > 0) in_batch = n;
      ++node.batch;
    }
  }
  // The new tip, from the working set as it was before this request joined it.
  if (active_ids_.empty()) {
    // The request's chunk count, read off its leaf (a request ends at its leaf's end) rather
    // than its hash vectors: three fewer dependent loads, which are cache misses when a round
    // opens on a cold tree.
    tip_level_ = slot.leaf == kRoot ? 0 : nodes_[slot.leaf].end;
    tip_node_ = slot.leaf;
  } else if (nodes_[in_batch].end <= tip_level_) {
    tip_level_ = nodes_[in_batch].end;
    tip_node_ = in_batch;
  }
  Repair(slot.leaf, segment_top);
  active_position_[id] = static_cast<uint32_t>(active_ids_.size());
  active_ids_.push_back(id);
  cache_valid_ = false;
}

// ---------------------------------------------------------------------------------------------
// Finish, Requeue, Remove.

// Takes an active request out of the working set and the active list and re-extends the tip.
// Returns the highest node that left the working set (the bottom of the path up to it did), or
// kNoNode. The caller repairs the tournament.
uint32_t ChunkedHashTree::LeaveActive(RequestId id) {
  FEATHER_CHECK(IsActive(id), "request is not active");
  RequestSlot& slot = requests_[id];
  uint32_t segment_top = kNoNode;
  for (uint32_t n = slot.leaf; n != kRoot; n = nodes_[n].parent) {
    --nodes_[n].batch;
    if (--nodes_[n].active == 0) {
      segment_top = n;
      --active_nodes_;
    }
  }
  RemoveFromActiveList(id);
  slot.state = State::kAbsent;
  ExtendTip();
  return segment_top;
}

// The batch's list of ids, O(1): the last id takes the leaving one's place.
void ChunkedHashTree::RemoveFromActiveList(RequestId id) {
  const uint32_t position = active_position_[id];
  const RequestId moved = active_ids_.back();
  active_ids_[position] = moved;
  active_position_[moved] = position;
  active_ids_.pop_back();
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
  while (!path_.empty() && nodes_[path_.back()].batch == count) {
    tip_node_ = path_.back();
    tip_level_ = nodes_[tip_node_].end;
    path_.pop_back();
  }
}

void ChunkedHashTree::Finish(RequestId id) { DetachAndRepair(id, LeaveActive(id)); }

void ChunkedHashTree::Retain(RequestId id) {
  FEATHER_CHECK(IsActive(id), "Retain of a request that is not active");
  RequestSlot& slot = requests_[id];
  for (uint32_t n = slot.leaf; n != kRoot; n = nodes_[n].parent) --nodes_[n].batch;
  RemoveFromActiveList(id);
  slot.state = State::kRetained;
  ++num_retained_;
  ExtendTip();
  cache_valid_ = false;  // the working set is unchanged, the tip and peers may not be
}

void ChunkedHashTree::Forget(RequestId id) {
  FEATHER_CHECK(IsRetained(id), "Forget of a request that is not retained");
  RequestSlot& slot = requests_[id];
  uint32_t segment_top = kNoNode;
  for (uint32_t n = slot.leaf; n != kRoot; n = nodes_[n].parent) {
    if (--nodes_[n].active == 0) {
      segment_top = n;
      --active_nodes_;
    }
  }
  slot.state = State::kAbsent;
  --num_retained_;
  DetachAndRepair(id, segment_top);
}

// A request that left the working set (the bottom of its path up to segment_top with it) leaves
// the tree: its path's members drop, emptied nodes are freed, the tournament is repaired.
void ChunkedHashTree::DetachAndRepair(RequestId id, uint32_t segment_top) {
  const ChainView hashes = HashesOf(id);
  const uint32_t survivor = DetachFromTree(id, &segment_top);
  Repair(survivor, segment_top);
  if (survivor != kRoot && nodes_[survivor].children == 1 && nodes_[survivor].terminals == 0) {
    MergeIntoOnlyChild(survivor, hashes);
  }
  ReleaseHashes(id);
  cache_valid_ = false;
}

void ChunkedHashTree::Requeue(RequestId id) {
  const uint32_t segment_top = LeaveActive(id);
  AttachAsWaiting(id, segment_top);
  cache_valid_ = false;
}

// Waiting -> `to`: the request leaves the waiting counts of its path, and its terminal entry
// goes stale (I3). The caller repairs.
void ChunkedHashTree::LeaveWaiting(RequestId id, State to) {
  RequestSlot& slot = requests_[id];
  slot.state = to;
  ++slot.epoch;
  --num_waiting_;
  for (uint32_t n = slot.leaf; n != kRoot; n = nodes_[n].parent) --nodes_[n].waiting;
}

void ChunkedHashTree::Park(RequestId id) {
  FEATHER_CHECK(IsWaiting(id), "Park of a request that is not waiting");
  LeaveWaiting(id, State::kParked);
  Repair(requests_[id].leaf, kNoNode);
  cache_valid_ = false;
}

void ChunkedHashTree::Unpark(RequestId id) {
  FEATHER_CHECK(IsParked(id), "Unpark of a request that is not parked");
  AttachAsWaiting(id, kNoNode);
  cache_valid_ = false;
}

void ChunkedHashTree::Remove(RequestId id) {
  FEATHER_CHECK(IsWaiting(id) || IsParked(id), "Remove of a request that is not waiting");
  if (IsWaiting(id)) {
    LeaveWaiting(id, State::kAbsent);
  } else {
    requests_[id].state = State::kAbsent;  // parked: already out of the counts and queues
  }
  const ChainView hashes = HashesOf(id);
  uint32_t segment_top = kNoNode;
  const uint32_t survivor = DetachFromTree(id, &segment_top);
  Repair(survivor, kNoNode);
  if (survivor != kRoot && nodes_[survivor].children == 1 && nodes_[survivor].terminals == 0) {
    MergeIntoOnlyChild(survivor, hashes);
  }
  ReleaseHashes(id);
  cache_valid_ = false;
}

// A request that left the tree needs its hash vector no more (nodes are freed with the hashes of
// their last member, which is still present then): give the memory back, so the tree's memory
// follows the requests present, not every request ever inserted.
void ChunkedHashTree::ReleaseHashes(RequestId id) {
  std::vector<PrefixHash>().swap(hashes_[id]);
  const uint32_t s = shared_of_[id];
  shared_of_[id] = kNoShared;
  if (s == kNoShared || --shared_[s].refs > 0) return;
  shared_index_.Erase(shared_[s].memo_key);
  std::vector<PrefixHash>().swap(shared_[s].hashes);
  free_shared_.push_back(s);
}

// Drops the request from the node structure: nodes no request passes through any more are freed
// (they form the bottom of its path). Returns the deepest surviving node of the path; if the
// freed nodes took the whole segment that left the working set, *segment_top becomes kNoNode.
// The caller repairs from the survivor, then merges it into its only child if it is left with one
// child and no request ending in it, so stretches stay maximal.
uint32_t ChunkedHashTree::DetachFromTree(RequestId id, uint32_t* segment_top) {
  RequestSlot& slot = requests_[id];
  const ChainView hashes = HashesOf(id);
  --nodes_[slot.leaf].terminals;
  uint32_t n = slot.leaf;
  for (uint32_t m = n; m != kRoot; m = nodes_[m].parent) --nodes_[m].members;
  while (n != kRoot && nodes_[n].members == 0) {
    const uint32_t parent = nodes_[n].parent;
    if (n == *segment_top) *segment_top = kNoNode;
    FreeNode(n, hashes);
    n = parent;
  }
  ++slot.epoch;
  slot.leaf = kRoot;
  return n;
}

void ChunkedHashTree::FreeNode(uint32_t node, ChainView hashes) {
  Node& dying = nodes_[node];
  FEATHER_DCHECK(dying.children == 0 && dying.active == 0 && dying.waiting == 0,
                 "freeing a node still in use");
  for (uint32_t level = dying.start; level <= dying.end; ++level) {
    chunk_to_node_.Erase(ChunkKey{hashes[level - 1], level});
  }
  UnlinkChild(node);
  ++dying.stamp;  // retires its entry, if any (I2)
  dying.best_key = kNoKey;
  queues_[node].Clear();
  free_nodes_.push_back(node);
}

// `node` (no terminals, one child) disappears into its child, which takes its place. The node's
// best was the child's (or both are active and own nothing of the node's), so the child's new
// entry carries the key the parent already holds.
void ChunkedHashTree::MergeIntoOnlyChild(uint32_t node, ChainView hashes) {
  const uint32_t child = nodes_[node].first_child;
  FEATHER_DCHECK(tip_node_ != node, "merging away the tip node");
  Node& upper = nodes_[node];
  if (upper.active > 0) --active_nodes_;  // the child is active too: it carries the same members
  for (uint32_t level = upper.start; level <= upper.end; ++level) {
    *chunk_to_node_.Find(ChunkKey{hashes[level - 1], level}) = child;
  }
  nodes_[child].start = upper.start;
  upper.first_child = kNoNode;
  upper.children = 0;
  ReplaceChild(node, child);
  ++upper.stamp;
  upper.best_key = kNoKey;
  queues_[node].Clear();
  free_nodes_.push_back(node);
  Publish(child);
}

// ---------------------------------------------------------------------------------------------
// Accounting and self-checks.

size_t ChunkedHashTree::MemoryBytes() const {
  size_t bytes = sizeof(*this) + chunk_to_node_.MemoryBytes();
  bytes += requests_.capacity() * sizeof(RequestSlot) + active_position_.capacity() * 4;
  bytes += hashes_.capacity() * sizeof(hashes_[0]);
  for (const auto& hashes : hashes_) bytes += hashes.capacity() * sizeof(PrefixHash);
  bytes += shared_of_.capacity() * 4 + free_shared_.capacity() * 4 + shared_index_.MemoryBytes();
  for (const SharedHashes& shared : shared_) {
    bytes += sizeof(SharedHashes) + shared.hashes.capacity() * sizeof(PrefixHash);
  }
  bytes += nodes_.capacity() * sizeof(Node) + queues_.capacity() * sizeof(Queue);
  for (const Queue& q : queues_) {
    bytes += (q.run.entries.capacity() + q.run2.entries.capacity() + q.heap.capacity()) *
             sizeof(Entry);
  }
  bytes += free_nodes_.capacity() * 4 + global_.capacity() * sizeof(Entry);
  bytes += active_ids_.capacity() * 4 + path_.capacity() * 4;
  return bytes;
}

void ChunkedHashTree::CheckInvariants() const {
  std::vector<Node> expect(nodes_.size());
  std::vector<uint8_t> is_free(nodes_.size(), 0);
  for (uint32_t f : free_nodes_) is_free[f] = 1;
  std::vector<uint64_t> expect_best(nodes_.size(), kNoKey);
  size_t waiting = 0;
  for (RequestId id = 0; id < requests_.size(); ++id) {
    const RequestSlot& slot = requests_[id];
    if (slot.state == State::kAbsent) continue;
    const ChainView hashes = HashesOf(id);
    const auto chunks = static_cast<uint32_t>(hashes.size());
    FEATHER_CHECK(slot.leaf == kRoot ? chunks == 0 : nodes_[slot.leaf].end == chunks,
                  "request does not end at its leaf's end");
    ++expect[slot.leaf].terminals;
    for (uint32_t n = slot.leaf; n != kRoot; n = nodes_[n].parent) {
      FEATHER_CHECK(!is_free[n], "request path through a freed node");
      ++expect[n].members;
      if (slot.state == State::kActive || slot.state == State::kRetained) ++expect[n].active;
      if (slot.state == State::kActive) ++expect[n].batch;
      if (slot.state == State::kWaiting) ++expect[n].waiting;
      for (uint32_t level = nodes_[n].start; level <= nodes_[n].end; ++level) {
        const uint32_t* mapped = chunk_to_node_.Find(ChunkKey{hashes[level - 1], level});
        FEATHER_CHECK(mapped != nullptr && *mapped == n, "chunk table disagrees with a path");
      }
    }
    if (slot.state == State::kWaiting) {
      ++waiting;
      // Domains by brute force: the request belongs to every node on its path whose child on
      // the path is inactive (and to its leaf).
      const uint64_t key = TerminalKey(id);
      uint32_t below = kNoNode;
      for (uint32_t n = slot.leaf;; n = nodes_[n].parent) {
        if (below == kNoNode || nodes_[below].active == 0) {
          expect_best[n] = std::min(expect_best[n], key);
        }
        if (n == kRoot) break;
        below = n;
      }
    }
  }
  FEATHER_CHECK(waiting == num_waiting_, "waiting count");
  size_t chunks_in_nodes = 0;
  uint32_t active_nodes = 0;
  for (uint32_t n = 1; n < nodes_.size(); ++n) {
    if (is_free[n]) continue;
    const Node& node = nodes_[n];
    if (node.active > 0) ++active_nodes;
    FEATHER_CHECK(node.members == expect[n].members && node.active == expect[n].active &&
                      node.batch == expect[n].batch && node.waiting == expect[n].waiting &&
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
  FEATHER_CHECK(active_nodes == active_nodes_, "active node count disagrees with a recount");

  // The tournament. I3 and the placement half of I2: every current entry is where its subject
  // belongs, with the subject's key.
  std::vector<uint32_t> published(nodes_.size(), 0);
  for (uint32_t n = 0; n < nodes_.size(); ++n) {
    if (is_free[n]) continue;
    const Queue& q = queues_[n];
    uint64_t front = kNoKey;
    const auto check = [&](const Entry& e) {
      if (!IsCurrent(e)) return;
      front = std::min(front, e.key);
      if (e.ref & kRequestBit) {
        const RequestId id = e.ref & ~kRequestBit;
        FEATHER_CHECK(requests_[id].leaf == n && e.key == TerminalKey(id),
                      "terminal entry in a foreign queue or with a stale key");
      } else {
        const Node& child = nodes_[e.ref];
        FEATHER_CHECK(!is_free[e.ref] && child.parent == n && child.active == 0 &&
                          e.key == child.best_key,
                      "child entry of an active, foreign or re-keyed node");
        ++published[e.ref];
      }
    };
    for (const Run* run : {&q.run, &q.run2}) {
      const std::vector<Entry>& e = run->entries;
      FEATHER_CHECK(run->head <= e.size(), "queue head past its run");
      for (size_t i = run->head; i < e.size(); ++i) {
        check(e[i]);
        FEATHER_CHECK(i == run->head || e[i - 1].key <= e[i].key, "queue run out of order");
      }
    }
    for (const Entry& e : q.heap) check(e);
    // I1: best is the queue's current minimum and the brute-force domain minimum.
    FEATHER_CHECK(nodes_[n].best_key == front, "best disagrees with its queue");
    FEATHER_CHECK(front == expect_best[n], "best disagrees with a brute-force domain minimum");
    FEATHER_CHECK(front == kNoKey || TerminalKey(nodes_[n].best) == front,
                  "best request does not hold the best key");
  }
  for (const Entry& e : global_) {
    if (!IsCurrent(e)) continue;
    const Node& owner = nodes_[e.ref];
    FEATHER_CHECK(!is_free[e.ref] && (e.ref == kRoot || owner.active > 0) &&
                      e.key == owner.best_key - (uint64_t{owner.end} << kSeqBits),
                  "global entry of an inactive or re-keyed node");
    ++published[e.ref];
  }
  // The uniqueness half of I2.
  for (uint32_t n = 0; n < nodes_.size(); ++n) {
    if (is_free[n]) continue;
    FEATHER_CHECK(published[n] == (nodes_[n].best_key == kNoKey ? 0u : 1u),
                  "a node with a best must have exactly one current entry");
  }

  const auto count = static_cast<uint32_t>(active_ids_.size());
  if (count == 0) {
    FEATHER_CHECK(tip_level_ == 0, "tip of an empty batch");
  } else {
    FEATHER_CHECK(tip_node_ == kRoot ? tip_level_ == 0 : nodes_[tip_node_].end == tip_level_,
                  "tip node and level disagree");
    FEATHER_CHECK(tip_node_ == kRoot || nodes_[tip_node_].batch == count,
                  "tip not shared by every active request");
    // The deepest such node: no child of the tip node holds the whole batch.
    for (uint32_t c = nodes_[tip_node_].first_child; c != kNoNode; c = nodes_[c].next_sibling) {
      FEATHER_CHECK(nodes_[c].batch < count, "tip short of the batch's common prefix");
    }
  }
}

}  // namespace feather
