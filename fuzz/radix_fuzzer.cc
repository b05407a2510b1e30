// radix_fuzzer.cc: libFuzzer target holding policies/ RadixCache to a naive longest-common-prefix
// reference over operation sequences the fuzzer chooses.
//
// The reference is the set of cached page-aligned prefixes (a std::set of token vectors) with a
// lock count per prefix: a match is the longest prefix of the key in the set, an insert adds
// every whole-page prefix of the key, a lock counts on every prefix up to the matched length.
// Eviction is where the radix tree's LRU policy decides, so after Evict (and after an Insert into
// a cache with a capacity) the reference is rebuilt from the tree's nodes and checked to be a
// subset of what was there (plus the inserted key), with every locked prefix kept, the freed
// count exact, and eviction stopping early only when nothing unlocked is left.
//
// Input (FuzzedDataProvider): page size 1..4, capacity (0 = unbounded, or 1..64 tokens), then up
// to 256 operations: Insert, MatchPrefix, lock a match (IncLockRef), unlock a held lock, Evict.
// Keys are a prefix of an earlier key plus a few tokens from a 3-token alphabet. After every
// operation: CheckInvariants, TotalTokens and ProtectedTokens against the reference, and
// PeekMatchTokens of every key seen so far.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <vector>

#include "base/check.h"
#include "policies/radix_cache.h"

namespace feather {
namespace {

using Tokens = std::vector<Token>;
constexpr int kMaxOps = 256;
constexpr size_t kMaxKeyTokens = 64;
constexpr RadixNodeId kFreeNodeParent = 0xfffffffeu;  // RadixCache's parent of a freed node

[[noreturn]] void Mismatch(int op, const char* what, uint64_t got, uint64_t want) {
  std::fprintf(stderr, "radix_fuzzer: after operation %d: %s: tree %llu, reference %llu\n", op,
               what, static_cast<unsigned long long>(got), static_cast<unsigned long long>(want));
  std::abort();
}

class NaiveCache {
 public:
  explicit NaiveCache(uint32_t page) : page_(page) {}

  [[nodiscard]] uint64_t Match(const Tokens& key) const {
    uint64_t matched = 0;
    for (uint64_t len = page_; len <= key.size(); len += page_) {
      if (prefixes_.count(Prefix(key, len)) == 0) break;
      matched = len;
    }
    return matched;
  }
  void Insert(const Tokens& key) {
    for (uint64_t len = page_; len <= key.size(); len += page_) prefixes_.insert(Prefix(key, len));
  }
  void Lock(const Tokens& key, uint64_t len, int delta) {
    for (uint64_t l = page_; l <= len; l += page_) {
      int& count = locks_[Prefix(key, l)];
      count += delta;
      FEATHER_CHECK(count >= 0, "naive: negative lock");
      if (count == 0) locks_.erase(Prefix(key, l));
    }
  }
  [[nodiscard]] uint64_t Total() const { return prefixes_.size() * page_; }
  [[nodiscard]] uint64_t Protected() const { return locks_.size() * page_; }

  // Replaces the content with the tree's (after an eviction the LRU policy chose), checking that
  // nothing appeared that was not there or in `also_allowed`, and that locked prefixes stayed.
  void ResyncFrom(const RadixCache& cache, const Tokens* also_allowed, int op) {
    std::set<Tokens> now;
    for (RadixNodeId node = 0; node < cache.NodeIdBound(); ++node) {
      if (node == cache.Root() || cache.Parent(node) == kFreeNodeParent) continue;
      Tokens path;
      for (RadixNodeId n = node; n != cache.Root(); n = cache.Parent(n)) {
        const auto edge = cache.EdgeTokens(n);
        path.insert(path.begin(), edge.begin(), edge.end());
      }
      FEATHER_CHECK(path.size() % page_ == 0, "a cached path that is not whole pages");
      for (uint64_t len = page_; len <= path.size(); len += page_) now.insert(Prefix(path, len));
    }
    for (const Tokens& p : now) {
      const bool allowed =
          prefixes_.count(p) != 0 || (also_allowed != nullptr && p.size() <= also_allowed->size() &&
                                      Prefix(*also_allowed, p.size()) == p);
      if (!allowed) Mismatch(op, "a prefix appeared that was never inserted", p.size(), 0);
    }
    for (const auto& [prefix, count] : locks_) {
      if (now.count(prefix) == 0) Mismatch(op, "a locked prefix was evicted", prefix.size(), 0);
    }
    prefixes_ = std::move(now);
  }

 private:
  [[nodiscard]] static Tokens Prefix(const Tokens& key, uint64_t len) {
    return Tokens(key.begin(), key.begin() + static_cast<std::ptrdiff_t>(len));
  }

  uint32_t page_;
  std::set<Tokens> prefixes_;
  std::map<Tokens, int> locks_;
};

struct HeldLock {
  RadixNodeId node;
  Tokens key;
  uint64_t len;
};

void Compare(const RadixCache& cache, const NaiveCache& ref, const std::vector<Tokens>& keys,
             const std::vector<HeldLock>& held, int op) {
  cache.CheckInvariants();
  if (cache.TotalTokens() != ref.Total()) Mismatch(op, "total", cache.TotalTokens(), ref.Total());
  if (cache.ProtectedTokens() != ref.Protected()) {
    Mismatch(op, "protected", cache.ProtectedTokens(), ref.Protected());
  }
  for (const Tokens& key : keys) {
    if (cache.PeekMatchTokens(key) != ref.Match(key)) {
      Mismatch(op, "peek", cache.PeekMatchTokens(key), ref.Match(key));
    }
  }
  for (const HeldLock& h : held) {
    if (cache.EndDepthTokens(h.node) != h.len) {
      Mismatch(op, "locked node depth", cache.EndDepthTokens(h.node), h.len);
    }
    FEATHER_CHECK(cache.LockRef(h.node) >= 1, "a held node lost its lock");
  }
}

}  // namespace
}  // namespace feather

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace feather;
  FuzzedDataProvider in(data, size);
  const uint32_t page = in.ConsumeIntegralInRange<uint32_t>(1, 4);
  const uint64_t capacity = in.ConsumeBool() ? 0 : in.ConsumeIntegralInRange<uint64_t>(1, 64);
  RadixCache cache(RadixCacheConfig{page, capacity});
  NaiveCache ref(page);
  std::vector<Tokens> keys;
  std::vector<HeldLock> held;

  for (int op = 0; op < kMaxOps && in.remaining_bytes() > 0; ++op) {
    const int kind = in.ConsumeIntegralInRange<int>(0, 5);
    if (kind <= 2) {  // a key for insert / match / lock
      Tokens key;
      if (!keys.empty() && in.ConsumeBool()) {
        const Tokens& base = keys[in.ConsumeIntegralInRange<size_t>(0, keys.size() - 1)];
        key.assign(base.begin(),
                   base.begin() + static_cast<std::ptrdiff_t>(
                                      in.ConsumeIntegralInRange<size_t>(0, base.size())));
      }
      const size_t extra = in.ConsumeIntegralInRange<size_t>(0, 3 * page + 4);
      for (size_t k = 0; k < extra && key.size() < kMaxKeyTokens; ++k) {
        key.push_back(in.ConsumeIntegralInRange<Token>(1, 3));
      }
      const uint64_t want = ref.Match(key);
      if (kind == 0) {
        const RadixInsert got = cache.Insert(key);
        if (got.prefix_tokens != want) Mismatch(op, "insert prefix", got.prefix_tokens, want);
        const uint64_t rounded = key.size() / page * page;
        if (cache.EndDepthTokens(got.node) != rounded) {
          Mismatch(op, "insert node depth", cache.EndDepthTokens(got.node), rounded);
        }
        ref.Insert(key);
        if (capacity != 0) ref.ResyncFrom(cache, &key, op);
        if (ref.Match(key) != rounded)
          Mismatch(op, "inserted key not cached", ref.Match(key), rounded);
      } else {
        const RadixMatch got = cache.MatchPrefix(key);
        if (got.matched_tokens != want) Mismatch(op, "match", got.matched_tokens, want);
        if (cache.EndDepthTokens(got.node) != want) {
          Mismatch(op, "match node depth", cache.EndDepthTokens(got.node), want);
        }
        if (kind == 2) {
          cache.IncLockRef(got.node);
          ref.Lock(key, want, +1);
          if (want > 0) held.push_back(HeldLock{got.node, key, want});
        }
      }
      keys.push_back(std::move(key));
    } else if (kind == 3) {  // unlock
      if (held.empty()) continue;
      const size_t i = in.ConsumeIntegralInRange<size_t>(0, held.size() - 1);
      const HeldLock h = held[i];
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
      cache.DecLockRef(h.node);
      ref.Lock(h.key, h.len, -1);
    } else {  // evict
      const uint64_t before = cache.TotalTokens();
      const uint64_t n = in.ConsumeIntegralInRange<uint64_t>(0, before + 2);
      const uint64_t freed = cache.Evict(n);
      if (before - cache.TotalTokens() != freed) {
        Mismatch(op, "freed tokens", freed, before - cache.TotalTokens());
      }
      if (freed < n && cache.EvictableTokens() != 0) {
        Mismatch(op, "eviction stopped early", freed, n);
      }
      ref.ResyncFrom(cache, nullptr, op);
    }
    Compare(cache, ref, keys, held, op);
  }
  return 0;
}
