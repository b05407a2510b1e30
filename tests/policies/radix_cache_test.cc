// radix_cache_test.cc: RadixCache against a brute-force reference, plus hand-made cases for
// splitting, paging, locking, LRU eviction, capacity and allocation-free matching.
#include "policies/radix_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <vector>

#include "base/check.h"
#include "base/rng.h"
#include "sim/workload/synthetic_prompts.h"

// Counts heap allocations so a test can assert that steady-state matching allocates nothing.
namespace {
std::atomic<uint64_t> g_allocations{0};
}  // namespace

// Kept out of line: GCC would otherwise see free() applied to operator new's result and warn.
[[gnu::noinline]] void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
[[gnu::noinline]] void* operator new[](std::size_t size) { return operator new(size); }
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

#include "tests/policies/radix_selector_test_support.h"

namespace feather {
namespace {

using testing::Cat;
using testing::Seg;
using testing::Tokens;

// ---------------------------------------------------------------------------------------------
// Reference: an uncompressed trie with one position per page and no cleverness. A position
// remembers its access tick, its lock count, and whether a radix node ends there; the radix
// node structure (which SGLang's touch and eviction granularity depends on) is thereby modelled
// explicitly. Matching is a page-by-page walk, eviction a full scan for the least recently
// used unlocked leaf node.
class ReferenceCache {
 public:
  ReferenceCache(uint32_t page, uint64_t capacity) : page_(page), capacity_(capacity) {
    root_.node_end = true;
  }

  uint64_t Peek(const Tokens& key) const {
    const Pos* p = &root_;
    uint64_t matched = 0;
    for (uint64_t off = 0; off + page_ <= key.size(); off += page_) {
      const auto it = p->children.find(Page(key, off));
      if (it == p->children.end()) break;
      p = it->second.get();
      matched += page_;
    }
    return matched;
  }

  uint64_t Match(const Tokens& key) {
    std::vector<Pos*> path = Walk(key);
    if (path.empty()) return 0;
    // Touch every node the path enters, whole (SGLang touches a child before splitting it).
    size_t i = 0;
    while (i < path.size()) {
      const uint64_t tick = ++clock_;
      Pos* p = path[i];
      for (;;) {
        p->time = tick;
        if (p->node_end) break;
        FEATHER_CHECK(p->children.size() == 1, "reference: branching inside a node");
        Pos* next = p->children.begin()->second.get();
        if (i + 1 < path.size() && path[i + 1] == next) ++i;
        p = next;
      }
      ++i;
    }
    Pos* last = path.back();
    if (!last->node_end) {  // split: the head half is a new node with the next tick
      last->node_end = true;
      const uint64_t tick = ++clock_;
      for (Pos* p = last; p != &root_; p = p->parent) {
        if (p != last && p->node_end) break;
        p->time = tick;
      }
    }
    return path.size() * page_;
  }

  uint64_t Insert(const Tokens& key) {
    const uint64_t n = key.size() / page_ * page_;
    if (n == 0) return 0;
    const uint64_t matched = Match(key);
    if (matched == n) return n;
    if (capacity_ != 0 && Total() + (n - matched) > capacity_) {
      Lock(key, matched, +1);
      Evict(Total() + (n - matched) - capacity_);
      Lock(key, matched, -1);
    }
    Pos* p = Find(key, matched);
    const uint64_t tick = ++clock_;
    for (uint64_t off = matched; off < n; off += page_) {
      auto child = std::make_unique<Pos>();
      child->parent = p;
      child->time = tick;
      Pos* raw = child.get();
      p->children.emplace(Page(key, off), std::move(child));
      p = raw;
      ++positions_;
    }
    p->node_end = true;
    return matched;
  }

  // Adds `delta` to the lock count of the first `len` tokens of `key` (all cached).
  void Lock(const Tokens& key, uint64_t len, int delta) {
    Pos* p = &root_;
    for (uint64_t off = 0; off < len; off += page_) {
      p = p->children.at(Page(key, off)).get();
      if (p->lock == 0 && delta > 0) ++locked_positions_;
      p->lock += delta;
      FEATHER_CHECK(p->lock >= 0, "reference: negative lock");
      if (p->lock == 0 && delta < 0) --locked_positions_;
    }
  }

  uint64_t Evict(uint64_t num_tokens) {
    uint64_t freed = 0;
    while (freed < num_tokens) {
      Pos* best = nullptr;
      FindLruLeaf(&root_, best);
      if (best == nullptr) break;
      // Remove the whole node: the leaf position and its ancestors up to the previous node end.
      Pos* p = best;
      for (;;) {
        Pos* parent = p->parent;
        for (auto it = parent->children.begin(); it != parent->children.end(); ++it) {
          if (it->second.get() == p) {
            parent->children.erase(it);
            break;
          }
        }
        --positions_;
        freed += page_;
        if (parent == &root_ || parent->node_end) break;
        p = parent;
      }
    }
    return freed;
  }

  [[nodiscard]] uint64_t Total() const { return positions_ * page_; }
  [[nodiscard]] uint64_t Protected() const { return locked_positions_ * page_; }

 private:
  struct Pos {
    Pos* parent = nullptr;
    std::map<Tokens, std::unique_ptr<Pos>> children;
    uint64_t time = 0;
    int lock = 0;
    bool node_end = false;
  };

  Tokens Page(const Tokens& key, uint64_t off) const {
    return Tokens(key.begin() + static_cast<std::ptrdiff_t>(off),
                  key.begin() + static_cast<std::ptrdiff_t>(off + page_));
  }
  std::vector<Pos*> Walk(const Tokens& key) {
    std::vector<Pos*> path;
    Pos* p = &root_;
    for (uint64_t off = 0; off + page_ <= key.size(); off += page_) {
      const auto it = p->children.find(Page(key, off));
      if (it == p->children.end()) break;
      p = it->second.get();
      path.push_back(p);
    }
    return path;
  }
  Pos* Find(const Tokens& key, uint64_t len) {
    Pos* p = &root_;
    for (uint64_t off = 0; off < len; off += page_) p = p->children.at(Page(key, off)).get();
    return p;
  }
  void FindLruLeaf(Pos* p, Pos*& best) {
    if (p != &root_ && p->children.empty() && p->lock == 0) {
      FEATHER_CHECK(p->node_end, "reference: a leaf position must end a node");
      if (best == nullptr || p->time < best->time) best = p;
    }
    for (auto& [page, child] : p->children) FindLruLeaf(child.get(), best);
  }

  uint32_t page_;
  uint64_t capacity_;
  Pos root_;
  uint64_t clock_ = 0;
  uint64_t positions_ = 0;
  uint64_t locked_positions_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Differential test.

struct Workload {
  std::vector<Tokens> keys;
};

// Radix-shaped prompts (1-4 levels, branching 1-8, short segments) and random prefixes of them,
// so matches and inserts end inside edges too.
Workload RadixWorkload(Rng& rng, uint32_t page) {
  RadixShape shape;
  shape.levels = static_cast<uint32_t>(rng.UniformInt(1, 4));
  shape.branching = static_cast<uint32_t>(rng.UniformInt(1, 8));
  shape.tokens_per_level = static_cast<uint32_t>(rng.UniformInt(1, 6)) * (page == 1 ? 1 : 7);
  shape.unique_suffix_tokens = static_cast<uint32_t>(rng.UniformInt(0, 4)) * page;
  const uint32_t count = static_cast<uint32_t>(rng.UniformInt(4, 16));
  const PromptSet set = MakeRadixPrompts(shape, count, rng.NextU64());
  Workload w;
  for (size_t i = 0; i < set.size(); ++i) {
    const auto prompt = set.Prompt(i);
    w.keys.emplace_back(prompt.begin(), prompt.end());
    const size_t cut = rng.Uniform(prompt.size() + 1);
    w.keys.emplace_back(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(cut));
  }
  return w;
}

// Sequences over a tiny alphabet grown from each other: dense sharing, splits everywhere, and
// (with pages) siblings whose first pages begin with the same token.
Workload SmallAlphabetWorkload(Rng& rng, uint32_t page) {
  Workload w;
  const int alphabet = page == 1 ? 3 : 2;
  const int count = static_cast<int>(rng.UniformInt(4, 20));
  for (int i = 0; i < count; ++i) {
    Tokens key;
    if (!w.keys.empty() && rng.Uniform(3) != 0) {
      const Tokens& base = w.keys[rng.Uniform(w.keys.size())];
      key.assign(base.begin(),
                 base.begin() + static_cast<std::ptrdiff_t>(rng.Uniform(base.size() + 1)));
    }
    const int64_t extra = rng.UniformInt(0, 3 * page + 8);
    for (int64_t k = 0; k < extra; ++k)
      key.push_back(static_cast<Token>(rng.UniformInt(1, alphabet)));
    w.keys.push_back(std::move(key));
  }
  return w;
}

struct HeldLock {
  RadixNodeId node;
  Tokens key;
  uint64_t len;
};

void ExpectSameState(const RadixCache& cache, const ReferenceCache& ref, const Workload& w,
                     const std::vector<HeldLock>& held, const char* after) {
  ASSERT_EQ(cache.TotalTokens(), ref.Total()) << "after " << after;
  ASSERT_EQ(cache.ProtectedTokens(), ref.Protected()) << "after " << after;
  for (const Tokens& key : w.keys) {
    ASSERT_EQ(cache.PeekMatchTokens(key), ref.Peek(key)) << "after " << after;
  }
  for (const HeldLock& h : held) {  // locked paths are never evicted
    ASSERT_GE(cache.PeekMatchTokens(h.key), h.len) << "after " << after;
    ASSERT_GE(cache.LockRef(h.node), 1u);
  }
  cache.CheckInvariants();
}

void RunDifferential(uint64_t seed, uint32_t page) {
  Rng rng(seed);
  const Workload w =
      rng.Uniform(2) == 0 ? RadixWorkload(rng, page) : SmallAlphabetWorkload(rng, page);
  uint64_t total_tokens = 0;
  for (const Tokens& k : w.keys) total_tokens += k.size();
  const uint64_t capacity =
      rng.Uniform(2) == 0
          ? 0
          : static_cast<uint64_t>(rng.UniformInt(1, static_cast<int64_t>(total_tokens / 2 + 1)));
  RadixCache cache(RadixCacheConfig{page, capacity});
  ReferenceCache ref(page, capacity);
  std::vector<HeldLock> held;
  const int ops = static_cast<int>(rng.UniformInt(20, 80));
  for (int op = 0; op < ops; ++op) {
    const Tokens& key = w.keys[rng.Uniform(w.keys.size())];
    const uint64_t kind = rng.Uniform(100);
    const char* name = nullptr;
    if (kind < 35) {
      name = "insert";
      const RadixInsert got = cache.Insert(key);
      ASSERT_EQ(got.prefix_tokens, ref.Insert(key)) << "insert, seed " << seed;
      ASSERT_EQ(cache.EndDepthTokens(got.node), key.size() / page * page);
    } else if (kind < 60) {
      name = "match";
      const RadixMatch got = cache.MatchPrefix(key);
      ASSERT_EQ(got.matched_tokens, ref.Match(key)) << "match, seed " << seed;
      ASSERT_EQ(cache.EndDepthTokens(got.node), got.matched_tokens);
    } else if (kind < 75) {
      name = "lock";
      const RadixMatch got = cache.MatchPrefix(key);
      ASSERT_EQ(got.matched_tokens, ref.Match(key)) << "lock, seed " << seed;
      cache.IncLockRef(got.node);
      ref.Lock(key, got.matched_tokens, +1);
      if (got.matched_tokens > 0) held.push_back(HeldLock{got.node, key, got.matched_tokens});
    } else if (kind < 85) {
      name = "unlock";
      if (held.empty()) continue;
      const size_t i = rng.Uniform(held.size());
      const HeldLock h = held[i];
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
      // A locked node keeps its id and end depth through later splits.
      ASSERT_EQ(cache.EndDepthTokens(h.node), h.len) << "seed " << seed;
      cache.DecLockRef(h.node);
      ref.Lock(h.key, h.len, -1);
    } else {
      name = "evict";
      const uint64_t n = rng.Uniform(cache.TotalTokens() / 2 + 2);
      ASSERT_EQ(cache.Evict(n), ref.Evict(n)) << "evict, seed " << seed;
    }
    ExpectSameState(cache, ref, w, held, name);
    if (::testing::Test::HasFatalFailure()) return;
  }
  // Drain: unlock everything and evict all; the LRU order is checked step by step above, the
  // end state must be empty.
  for (const HeldLock& h : held) cache.DecLockRef(h.node);
  EXPECT_EQ(cache.EvictableTokens(), cache.TotalTokens());
  cache.Evict(~uint64_t{0});
  EXPECT_EQ(cache.TotalTokens(), 0u);
  EXPECT_EQ(cache.NodeCount(), 1u);
  cache.CheckInvariants();
}

TEST(RadixCacheDifferentialTest, PageSizeOneMatchesReference) {
  for (uint64_t seed = 1; seed <= 1500; ++seed) {
    RunDifferential(seed, 1);
    if (HasFatalFailure()) FAIL() << "seed " << seed;
  }
}

TEST(RadixCacheDifferentialTest, PageSizeSixteenMatchesReference) {
  for (uint64_t seed = 1; seed <= 1000; ++seed) {
    RunDifferential(seed * 7919, 16);
    if (HasFatalFailure()) FAIL() << "seed " << seed * 7919;
  }
}

// ---------------------------------------------------------------------------------------------
// Hand-made cases.

TEST(RadixCacheTest, MatchSplitsTheEdgeWhereTheMatchEnds) {
  RadixCache cache;
  const Tokens a = Seg(100, 10);
  EXPECT_EQ(cache.Insert(a).prefix_tokens, 0u);
  EXPECT_EQ(cache.NodeCount(), 2u);
  const Tokens probe = Cat({Seg(100, 4), Seg(900, 3)});
  EXPECT_EQ(cache.PeekMatchTokens(probe), 4u);
  EXPECT_EQ(cache.NodeCount(), 2u);  // peeking never splits
  const RadixMatch m = cache.MatchPrefix(probe);
  EXPECT_EQ(m.matched_tokens, 4u);
  EXPECT_EQ(cache.NodeCount(), 3u);
  EXPECT_EQ(cache.EndDepthTokens(m.node), 4u);
  EXPECT_EQ(cache.Parent(m.node), cache.Root());
  EXPECT_EQ(std::vector<Token>(cache.EdgeTokens(m.node).begin(), cache.EdgeTokens(m.node).end()),
            Seg(100, 4));
  // A match ending exactly at a node boundary splits nothing.
  EXPECT_EQ(cache.MatchPrefix(Seg(100, 4)).node, m.node);
  EXPECT_EQ(cache.MatchPrefix(a).matched_tokens, 10u);
  EXPECT_EQ(cache.NodeCount(), 3u);
  EXPECT_EQ(cache.TotalTokens(), 10u);
  cache.CheckInvariants();
}

TEST(RadixCacheTest, InsertReturnsCachedPrefixAndSplitsOnDivergence) {
  RadixCache cache;
  const Tokens x = Cat({Seg(1, 8), Seg(50, 4)});
  const Tokens y = Cat({Seg(1, 8), Seg(70, 6)});
  const RadixInsert ix = cache.Insert(x);
  EXPECT_EQ(ix.prefix_tokens, 0u);
  const RadixInsert iy = cache.Insert(y);
  EXPECT_EQ(iy.prefix_tokens, 8u);
  EXPECT_EQ(cache.TotalTokens(), 18u);
  EXPECT_EQ(cache.NodeCount(), 4u);  // root, shared head, two tails
  EXPECT_EQ(cache.EndDepthTokens(iy.node), 14u);
  EXPECT_EQ(cache.EndDepthTokens(cache.Parent(iy.node)), 8u);
  EXPECT_EQ(cache.Parent(ix.node), cache.Parent(iy.node));  // x's node id survived the split
  EXPECT_EQ(cache.Insert(x).prefix_tokens, 12u);            // already cached: nothing new
  EXPECT_EQ(cache.TotalTokens(), 18u);
  EXPECT_EQ(cache.Insert({}).prefix_tokens, 0u);
  cache.CheckInvariants();
}

TEST(RadixCacheTest, PagedKeysMatchWholePagesOnly) {
  RadixCache cache(RadixCacheConfig{16, 0});
  const Tokens a = Seg(1000, 40);  // 2 pages cached, 8 tokens dropped
  EXPECT_EQ(cache.Insert(a).prefix_tokens, 0u);
  EXPECT_EQ(cache.TotalTokens(), 32u);
  EXPECT_EQ(cache.PeekMatchTokens(a), 32u);
  EXPECT_EQ(cache.PeekMatchTokens(Seg(1000, 31)), 16u);  // second page incomplete
  Tokens b = Seg(1000, 48);
  b[20] = -5;  // mismatch inside the second page: only the first page matches
  const RadixMatch m = cache.MatchPrefix(b);
  EXPECT_EQ(m.matched_tokens, 16u);
  EXPECT_EQ(cache.EndDepthTokens(m.node), 16u);
  EXPECT_EQ(cache.Insert(b).prefix_tokens, 16u);
  EXPECT_EQ(cache.TotalTokens(), 32u + 32u);
  // Two siblings whose pages begin with the same token are told apart by the whole page.
  Tokens c = Seg(1000, 32);
  c[17] = -7;
  EXPECT_EQ(cache.PeekMatchTokens(c), 16u);
  EXPECT_EQ(cache.Insert(c).prefix_tokens, 16u);
  EXPECT_EQ(cache.PeekMatchTokens(c), 32u);
  EXPECT_EQ(cache.PeekMatchTokens(a), 32u);
  EXPECT_EQ(cache.PeekMatchTokens(b), 48u);
  cache.CheckInvariants();
}

TEST(RadixCacheTest, LocksMoveTokensBetweenEvictableAndProtected) {
  RadixCache cache;
  const RadixInsert a = cache.Insert(Cat({Seg(1, 5), Seg(20, 5)}));
  const RadixInsert b = cache.Insert(Cat({Seg(1, 5), Seg(40, 3)}));
  EXPECT_EQ(cache.EvictableTokens(), 13u);
  cache.IncLockRef(a.node);
  EXPECT_EQ(cache.ProtectedTokens(), 10u);
  EXPECT_EQ(cache.EvictableTokens(), 3u);
  cache.IncLockRef(b.node);
  EXPECT_EQ(cache.ProtectedTokens(), 13u);
  EXPECT_EQ(cache.Evict(100), 0u);  // everything is locked
  cache.DecLockRef(a.node);
  EXPECT_EQ(cache.ProtectedTokens(), 8u);  // the shared head is still held by b
  EXPECT_EQ(cache.Evict(100), 5u);         // only a's tail can go
  EXPECT_EQ(cache.PeekMatchTokens(Cat({Seg(1, 5), Seg(40, 3)})), 8u);
  cache.DecLockRef(b.node);
  EXPECT_EQ(cache.Evict(100), 8u);  // b's tail, then the head that became a leaf
  EXPECT_EQ(cache.TotalTokens(), 0u);
  cache.CheckInvariants();
}

TEST(RadixCacheTest, EvictsLeastRecentlyUsedLeafFirst) {
  RadixCache cache;
  const Tokens a = Seg(100, 4);
  const Tokens b = Seg(200, 5);
  const Tokens c = Seg(300, 6);
  (void)cache.Insert(a);
  (void)cache.Insert(b);
  (void)cache.Insert(c);
  (void)cache.MatchPrefix(a);     // a becomes the most recent
  EXPECT_EQ(cache.Evict(1), 5u);  // b is the oldest
  EXPECT_EQ(cache.PeekMatchTokens(b), 0u);
  EXPECT_EQ(cache.PeekMatchTokens(a), 4u);
  EXPECT_EQ(cache.Evict(1), 6u);  // then c
  EXPECT_EQ(cache.PeekMatchTokens(c), 0u);
  EXPECT_EQ(cache.PeekMatchTokens(a), 4u);
  (void)cache.Insert(b);
  (void)cache.PeekMatchTokens(a);  // peeking does not count as a use
  EXPECT_EQ(cache.Evict(1), 4u);   // a is now older than the new b
  EXPECT_EQ(cache.PeekMatchTokens(b), 5u);
}

TEST(RadixCacheTest, ParentThatBecomesAnUnlockedLeafIsEvictedNextInLruOrder) {
  RadixCache cache;
  const Tokens x = Cat({Seg(1, 10), Seg(100, 2)});
  const Tokens y = Cat({Seg(1, 10), Seg(200, 3)});
  const Tokens z = Seg(500, 7);
  (void)cache.Insert(x);
  (void)cache.Insert(y);  // splits: head [1..10], tails x and y
  (void)cache.Insert(z);
  // Oldest leaves: x's tail, then y's tail; their parent (touched by y's insert) comes next,
  // before z, which was inserted last.
  EXPECT_EQ(cache.Evict(2), 2u);
  EXPECT_EQ(cache.PeekMatchTokens(x), 10u);
  EXPECT_EQ(cache.Evict(3), 3u);
  EXPECT_EQ(cache.PeekMatchTokens(y), 10u);
  EXPECT_EQ(cache.Evict(1), 10u);
  EXPECT_EQ(cache.PeekMatchTokens(x), 0u);
  EXPECT_EQ(cache.PeekMatchTokens(z), 7u);
  cache.CheckInvariants();
}

TEST(RadixCacheTest, CapacityEvictsOnInsertButNeverTheMatchedPathOrLockedNodes) {
  RadixCache cache(RadixCacheConfig{1, 30});
  const Tokens a = Seg(100, 12);
  const Tokens b = Seg(200, 12);
  const Tokens c = Seg(300, 12);
  (void)cache.Insert(a);
  (void)cache.Insert(b);
  EXPECT_EQ(cache.TotalTokens(), 24u);
  (void)cache.Insert(c);  // 36 > 30: the LRU leaf a goes
  EXPECT_EQ(cache.TotalTokens(), 24u);
  EXPECT_EQ(cache.PeekMatchTokens(a), 0u);
  EXPECT_EQ(cache.EvictedTokensTotal(), 12u);
  cache.IncLockRef(cache.MatchPrefix(b).node);  // b locked (and touched)
  // Extending c: c's own path is protected during the eviction, b is locked: nothing can go, so
  // the cache goes over capacity instead of dropping a prefix someone holds.
  const RadixInsert cx = cache.Insert(Cat({c, Seg(900, 10)}));
  EXPECT_EQ(cx.prefix_tokens, 12u);
  EXPECT_EQ(cache.TotalTokens(), 34u);
  EXPECT_EQ(cache.PeekMatchTokens(b), 12u);
  EXPECT_EQ(cache.PeekMatchTokens(Cat({c, Seg(900, 10)})), 22u);
  // A new key evicts the LRU unlocked leaf (c's extension, then c itself) to make room.
  (void)cache.Insert(Seg(400, 8));
  EXPECT_EQ(cache.PeekMatchTokens(c), 0u);
  EXPECT_EQ(cache.TotalTokens(), 20u);
  cache.CheckInvariants();
}

TEST(RadixCacheTest, ChurnAtCapacityCompactsTheArenaAndKeepsContents) {
  RadixCache cache(RadixCacheConfig{1, 3000});
  const PromptSet prompts = MakeGroupedPrompts(400, 8, 200, 100, 42);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto p = prompts.Prompt(i);
    (void)cache.Insert(p);
    EXPECT_LE(cache.TotalTokens(), 3000u);
    EXPECT_EQ(cache.PeekMatchTokens(p), p.size());  // the newest prompt is always cached
  }
  EXPECT_GT(cache.EvictedTokensTotal(), 20000u);
  // The arena is bounded by the compaction rule, not by the tokens ever inserted.
  EXPECT_LT(cache.MemoryBytes(), size_t{200} * 1024);
  cache.CheckInvariants();
}

TEST(RadixCacheTest, ResetEmptiesTheTree) {
  RadixCache cache;
  (void)cache.Insert(Seg(1, 50));
  cache.Reset();
  EXPECT_EQ(cache.TotalTokens(), 0u);
  EXPECT_EQ(cache.NodeCount(), 1u);
  EXPECT_EQ(cache.PeekMatchTokens(Seg(1, 50)), 0u);
  (void)cache.Insert(Seg(1, 50));
  EXPECT_EQ(cache.PeekMatchTokens(Seg(1, 50)), 50u);
  cache.CheckInvariants();
}

TEST(RadixCacheTest, MatchAllocatesNothingAfterWarmUp) {
  RadixCache cache;
  const PromptSet prompts = MakeRadixPrompts(RadixShape{3, 4, 500, 200}, 64, 7);
  for (size_t i = 0; i < prompts.size(); ++i) (void)cache.Insert(prompts.Prompt(i));
  for (size_t i = 0; i < prompts.size(); ++i) (void)cache.MatchPrefix(prompts.Prompt(i));
  const uint64_t before = g_allocations.load();
  uint64_t matched = 0;
  for (int round = 0; round < 10; ++round) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      matched += cache.MatchPrefix(prompts.Prompt(i)).matched_tokens;
    }
  }
  EXPECT_EQ(g_allocations.load(), before);
  EXPECT_EQ(matched, 10u * prompts.tokens.size());
}

TEST(RadixCacheDeathTest, UnlockingBelowZeroIsABug) {
  RadixCache cache;
  const RadixInsert a = cache.Insert(Seg(1, 4));
  EXPECT_DEATH(cache.DecLockRef(a.node), "DecLockRef below zero");
}

TEST(RadixCacheDeathTest, PageSizeZeroIsRejected) {
  EXPECT_DEATH({ RadixCache bad(RadixCacheConfig{0, 0}); }, "page_size");
}

}  // namespace
}  // namespace feather
