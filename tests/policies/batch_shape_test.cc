// batch_shape_test.cc: the batch shape (policies/batch_shape.h) against a brute-force
// recomputation over random batches, seed by seed: requests enter and leave the tracker, each
// round re-forms the batch and admits candidates, and every StopContext field the tracker fills
// is recomputed from scratch from the members' chains (O(n^2 · blocks), no hash maps, no
// incremental state).
#include "policies/batch_shape.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

namespace feather {
namespace {

constexpr uint32_t kBlock = 16;

struct Req {
  RequestId id = 0;
  std::vector<PrefixHash> chain;
  uint32_t sequence = 0;
};

PrefixHash Mix(PrefixHash parent, uint64_t content) {
  uint64_t x = parent * 0x9E3779B97F4A7C15ull + content + 0x632BE59BD9B4E019ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  return x ^ (x >> 29);
}

// A prompt of a random group: the group's prefix (one of a few lengths around the group
// depths), optionally a sub-group's continuation, then its own blocks.
Req MakeRequest(RequestId id, std::mt19937_64& rng) {
  static constexpr uint32_t kPrefixBlocks[] = {0, 8, 16, 20, 32, 40, 64, 70, 128, 260};
  const uint64_t group = rng() % 5;
  const uint32_t prefix = kPrefixBlocks[(group * 3 + 1) % std::size(kPrefixBlocks)] +
                          static_cast<uint32_t>(rng() % 2) * 4;
  const uint64_t sub = rng() % 3;
  const uint32_t sub_blocks = static_cast<uint32_t>(rng() % 40);
  const uint32_t own = static_cast<uint32_t>(rng() % 12);
  Req r;
  r.id = id;
  PrefixHash h = 0;
  for (uint32_t i = 0; i < prefix; ++i) r.chain.push_back(h = Mix(h, group * 1000 + i));
  for (uint32_t i = 0; i < sub_blocks; ++i)
    r.chain.push_back(h = Mix(h, (1u << 20) | (sub * 100 + i)));
  for (uint32_t i = 0; i < own; ++i) r.chain.push_back(h = Mix(h, rng()));
  r.sequence = static_cast<uint32_t>(r.chain.size()) * kBlock + static_cast<uint32_t>(rng() % 40);
  return r;
}

size_t Shared(const std::vector<PrefixHash>& a, const std::vector<PrefixHash>& b, size_t limit) {
  size_t n = 0;
  while (n < limit && n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

// Leading blocks of `m`'s chain that at least `holders` of `everyone` hold at the same position.
uint32_t Held(const Req& m, const std::vector<const Req*>& everyone, uint32_t holders) {
  uint32_t held = 0;
  for (; held < m.chain.size(); ++held) {
    uint32_t count = 0;
    for (const Req* r : everyone)
      count += r->chain.size() > held && r->chain[held] == m.chain[held];
    if (count < holders) break;
  }
  return held;
}

std::vector<uint32_t> Blocks() {
  std::vector<uint32_t> blocks;
  for (const uint32_t depth : StopContext::kPrefixGroupDepths) {
    blocks.push_back((depth + kBlock - 1) / kBlock);
  }
  return blocks;
}

// The brute-force shape: `batch` in order (running first, then those admitted this round);
// `holders_at[i]` = the requests holding KV when batch[i] joined the shape (all running ones for
// a running request; running + admitted so far for an admitted one); `round_prefix` the round's
// starting common prefix (tokens; for the empty batch unused); `cached[i]` the cache hit of
// admitted request i (unused for running ones).
struct Expected {
  StopContext context;
  uint32_t after = 0;
};
Expected BruteForce(const std::vector<const Req*>& batch, size_t running,
                    const std::vector<std::vector<const Req*>>& holders_at, uint32_t round_prefix,
                    const std::vector<uint32_t>& cached, const Req& candidate,
                    uint32_t candidate_cached, uint64_t used_blocks) {
  Expected e;
  StopContext& c = e.context;
  for (const Req* r : batch) c.batch_kv_tokens += r->sequence;
  c.batch_unique_kv_tokens = used_blocks * kBlock;
  // The common prefix: the round's, then each admission keeps what it shares with the first
  // request within its cache hit; the very first request shares all its blocks.
  bool empty = batch.empty();
  uint32_t prefix = running > 0 ? round_prefix : 0;
  auto prefix_with = [&](const Req& r, uint32_t hit, bool first) {
    if (first) return static_cast<uint32_t>(r.chain.size()) * kBlock;
    return static_cast<uint32_t>(
               Shared(r.chain, batch.front()->chain, std::min(prefix, hit) / kBlock)) *
           kBlock;
  };
  for (size_t i = running; i < batch.size(); ++i)
    prefix = prefix_with(*batch[i], cached[i], i == 0);
  c.batch_common_prefix_tokens = empty ? 0 : prefix;
  e.after = prefix_with(candidate, candidate_cached, empty);
  c.candidate_tokens = candidate.sequence;
  c.candidate_cached_tokens = candidate_cached;
  c.candidate_common_prefix_tokens = e.after;
  const std::vector<uint32_t> blocks = Blocks();
  PrefixHash first_key = 0;  // the first depth's largest group's key
  for (size_t d = 0; d < blocks.size(); ++d) {
    const uint32_t b = blocks[d];
    // Replay the batch: after each member, recount every key from scratch; the largest is the
    // key that first reached the largest count; remember where it took over.
    PrefixHash best_key = 0;
    uint32_t best = 0;
    size_t takeover = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      if (batch[i]->chain.size() < b) continue;
      const PrefixHash key = batch[i]->chain[b - 1];
      uint32_t count = 0;
      for (size_t j = 0; j <= i; ++j) {
        count += batch[j]->chain.size() >= b && batch[j]->chain[b - 1] == key;
      }
      if (count > best && !(best > 0 && key == best_key)) takeover = i;
      if (count > best) best_key = key, best = count;
    }
    StopContext::PrefixGroup& g = c.largest_groups[d];
    if (best == 0) continue;
    g.requests = best;
    // At the takeover: the blocks `count` holders hold; then each later member's share.
    const Req& m = *batch[takeover];
    uint32_t count_then = 0;
    for (size_t j = 0; j <= takeover; ++j) {
      count_then += batch[j]->chain.size() >= b && batch[j]->chain[b - 1] == best_key;
    }
    size_t shared = Held(m, holders_at[takeover], count_then);
    for (size_t j = takeover + 1; j < batch.size(); ++j) {
      if (batch[j]->chain.size() >= b && batch[j]->chain[b - 1] == best_key) {
        shared = Shared(batch[j]->chain, m.chain, shared);
      }
    }
    g.prefix_tokens = static_cast<uint32_t>(shared) * kBlock;
    g.candidate_in = candidate.chain.size() >= b && candidate.chain[b - 1] == best_key;
    if (d == 0) first_key = best_key;
    g.nested = d == 0 || m.chain[blocks[0] - 1] == first_key;
  }
  return e;
}

void ExpectSameShape(const StopContext& got, const StopContext& want, const std::string& where) {
  EXPECT_EQ(got.batch_kv_tokens, want.batch_kv_tokens) << where;
  EXPECT_EQ(got.batch_unique_kv_tokens, want.batch_unique_kv_tokens) << where;
  EXPECT_EQ(got.batch_common_prefix_tokens, want.batch_common_prefix_tokens) << where;
  EXPECT_EQ(got.candidate_tokens, want.candidate_tokens) << where;
  EXPECT_EQ(got.candidate_cached_tokens, want.candidate_cached_tokens) << where;
  EXPECT_EQ(got.candidate_common_prefix_tokens, want.candidate_common_prefix_tokens) << where;
  for (size_t d = 0; d < got.largest_groups.size(); ++d) {
    EXPECT_EQ(got.largest_groups[d].requests, want.largest_groups[d].requests)
        << where << " d" << d;
    EXPECT_EQ(got.largest_groups[d].prefix_tokens, want.largest_groups[d].prefix_tokens)
        << where << " d" << d;
    EXPECT_EQ(got.largest_groups[d].candidate_in, want.largest_groups[d].candidate_in)
        << where << " d" << d;
    EXPECT_EQ(got.largest_groups[d].nested, want.largest_groups[d].nested) << where << " d" << d;
  }
}

TEST(BatchShapeTrackerTest, MatchesBruteForceOverRandomRounds) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 rng(seed);
    BatchShapeTracker tracker(kBlock);
    std::map<RequestId, Req> all;    // every request made, by id
    std::vector<RequestId> running;  // the tracker's members, in order (the reference's copy)
    RequestId next_id = 0;
    for (int round = 0; round < 25; ++round) {
      // Some running requests finish or are preempted; ids are recycled sometimes.
      for (size_t i = 0; i < running.size();) {
        if (rng() % 4 == 0) {
          tracker.Leave(running[i]);
          running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
        } else {
          all[running[i]].sequence += static_cast<uint32_t>(rng() % 3);  // decoded tokens
          ++i;
        }
      }
      std::vector<uint32_t> sequences;
      std::vector<const Req*> batch;
      for (const RequestId id : running) {
        sequences.push_back(all[id].sequence);
        batch.push_back(&all[id]);
      }
      const bool given_prefix = rng() % 2 == 0;
      const uint32_t round_prefix =
          given_prefix
              ? static_cast<uint32_t>(rng() % 30) * kBlock
              : (batch.empty()
                     ? 0
                     : Held(*batch.front(), batch, static_cast<uint32_t>(batch.size())) * kBlock);
      tracker.BeginRound(sequences, given_prefix ? int64_t{round_prefix} : -1);
      const size_t n_running = batch.size();
      std::vector<std::vector<const Req*>> holders_at(n_running, batch);
      std::vector<uint32_t> cached(n_running, 0);
      const int proposals = static_cast<int>(rng() % 8);
      for (int p = 0; p < proposals; ++p) {
        const RequestId id =
            (rng() % 3 == 0 && next_id > 0) ? static_cast<RequestId>(rng() % next_id) : next_id;
        if (tracker.Contains(id)) continue;
        if (id == next_id) ++next_id;
        all[id] = MakeRequest(id, rng);
        const Req& cand = all[id];
        const uint32_t hit = rng() % 2 == 0 ? static_cast<uint32_t>(cand.chain.size()) * kBlock
                                            : static_cast<uint32_t>(rng() % 60) * kBlock;
        const uint64_t used = rng() % 5000;
        StopContext got;
        const uint32_t after = tracker.Fill(got, id, cand.chain, cand.sequence, hit, used);
        const Expected want =
            BruteForce(batch, n_running, holders_at, round_prefix, cached, cand, hit, used);
        const std::string where = "seed " + std::to_string(seed) + " round " +
                                  std::to_string(round) + " proposal " + std::to_string(p);
        ExpectSameShape(got, want.context, where);
        EXPECT_EQ(after, want.after) << where;
        if (::testing::Test::HasFailure()) return;
        if (rng() % 3 != 0) {  // admitted
          tracker.Admit(id, cand.chain, cand.sequence);
          running.push_back(id);
          batch.push_back(&all[id]);
          holders_at.push_back(batch);
          cached.push_back(hit);
        }
      }
    }
    ASSERT_EQ(std::vector<RequestId>(tracker.members().begin(), tracker.members().end()), running);
  }
}

TEST(BatchShapeTrackerTest, TwoGroupsByHand) {
  // Three requests of group A (32 shared blocks = 512 tokens), two of group B (20 blocks);
  // candidate of B. Depth 256 (16 blocks): A leads with 3; depth 512 (32 blocks): A with 3.
  auto chain = [](uint64_t group, uint32_t shared, uint64_t own) {
    std::vector<PrefixHash> c;
    PrefixHash h = 0;
    for (uint32_t i = 0; i < shared; ++i) c.push_back(h = Mix(h, group * 100 + i));
    for (uint32_t i = 0; i < 4; ++i) c.push_back(h = Mix(h, own * 1000 + i));
    return c;
  };
  BatchShapeTracker tracker(kBlock);
  tracker.Enter(0, chain(1, 32, 0));
  tracker.Enter(1, chain(2, 20, 1));
  tracker.Enter(2, chain(1, 32, 2));
  tracker.Enter(3, chain(1, 32, 3));
  tracker.Enter(4, chain(2, 20, 4));
  const std::vector<uint32_t> seq = {600, 400, 600, 600, 400};
  tracker.BeginRound(seq);
  StopContext c;
  const std::vector<PrefixHash> cand = chain(2, 20, 5);
  tracker.Fill(c, 5, cand, 400, 320, 99);
  EXPECT_EQ(c.batch_kv_tokens, 2600u);
  EXPECT_EQ(c.batch_unique_kv_tokens, 99u * kBlock);
  EXPECT_EQ(c.batch_common_prefix_tokens, 0u);  // A and B share nothing
  EXPECT_EQ(c.candidate_common_prefix_tokens, 0u);
  EXPECT_EQ(c.largest_groups[0].requests, 3u);
  EXPECT_EQ(c.largest_groups[0].prefix_tokens, 512u);
  EXPECT_FALSE(c.largest_groups[0].candidate_in);
  EXPECT_EQ(c.largest_groups[1].requests, 3u);  // 512 tokens: A's 32 blocks
  EXPECT_EQ(c.largest_groups[2].requests, 0u);  // nobody reaches 1024 tokens
  // A leaves: B (2 + the candidate) is the batch; its common prefix is B's 20 blocks.
  tracker.Leave(0);
  tracker.Leave(2);
  tracker.Leave(3);
  tracker.BeginRound(std::vector<uint32_t>{400, 400});
  tracker.Fill(c, 5, cand, 400, 320, 99);
  EXPECT_EQ(c.batch_common_prefix_tokens, 320u);
  EXPECT_EQ(c.candidate_common_prefix_tokens, 320u);
  EXPECT_TRUE(c.largest_groups[0].candidate_in);
  EXPECT_EQ(c.largest_groups[0].prefix_tokens, 320u);
  EXPECT_EQ(c.largest_groups[0].waiting, 0u);  // nobody told it of waiting requests
  // Waiting requests are counted by their first-depth key across rounds: two of B wait, one
  // of A; one of B is admitted; a chain shorter than the depth has no key.
  tracker.Waiting(chain(2, 20, 6), +1);
  tracker.Waiting(chain(2, 20, 7), +1);
  tracker.Waiting(chain(1, 32, 8), +1);
  tracker.Waiting(chain(2, 20, 6), -1);
  std::vector<PrefixHash> short_chain = chain(2, 20, 9);
  short_chain.resize(8);  // 128 tokens: below the first depth
  tracker.Waiting(short_chain, +1);
  tracker.BeginRound(std::vector<uint32_t>{400, 400});
  tracker.Fill(c, 5, cand, 400, 320, 99);
  EXPECT_EQ(c.largest_groups[0].waiting, 1u);
  EXPECT_EQ(c.largest_groups[1].waiting, 0u);  // B's 24 blocks do not reach the second depth
  // Never below zero.
  tracker.Waiting(chain(2, 20, 7), -1);
  tracker.Waiting(chain(2, 20, 7), -1);
  tracker.Fill(c, 5, cand, 400, 320, 99);
  EXPECT_EQ(c.largest_groups[0].waiting, 0u);
  // A group whose count reached zero is forgotten and counted afresh when one waits again.
  tracker.Waiting(chain(2, 20, 7), +1);
  tracker.Fill(c, 5, cand, 400, 320, 99);
  EXPECT_EQ(c.largest_groups[0].waiting, 1u);
}

TEST(BatchShapeTrackerTest, DeeperGroupsCountTheirWaitingAndSayWhetherTheyAreNested) {
  // A radix tree: branch X (16 blocks = 256 tokens) with leaves X0 and X1 (16 more blocks each),
  // and branch Y with leaf Y0. Depth 256 keys the branch, depth 512 the leaf.
  auto chain = [](uint64_t branch, uint64_t leaf, uint64_t own) {
    std::vector<PrefixHash> c;
    PrefixHash h = 0;
    for (uint32_t i = 0; i < 16; ++i) c.push_back(h = Mix(h, branch * 100 + i));
    for (uint32_t i = 0; i < 16; ++i) c.push_back(h = Mix(h, leaf * 1000 + i));
    for (uint32_t i = 0; i < 2; ++i) c.push_back(h = Mix(h, own * 100000 + i));
    return c;
  };
  BatchShapeTracker tracker(kBlock);
  // The batch: three of X (two of leaf X0, one of X1) and two of Y0. X is the largest branch and
  // X0 the largest leaf, within X; the candidate is of X1.
  tracker.Enter(0, chain(1, 10, 0));
  tracker.Enter(1, chain(2, 20, 1));
  tracker.Enter(2, chain(1, 10, 2));
  tracker.Enter(3, chain(2, 20, 3));
  tracker.Enter(4, chain(1, 11, 4));
  tracker.Waiting(chain(1, 10, 5), +1);
  tracker.Waiting(chain(1, 10, 6), +1);
  tracker.Waiting(chain(1, 11, 7), +1);
  tracker.Waiting(chain(2, 20, 8), +1);
  tracker.BeginRound(std::vector<uint32_t>(5, 544));
  StopContext c;
  const std::vector<PrefixHash> cand = chain(1, 11, 9);
  tracker.Fill(c, 9, cand, 544, 512, 99);
  EXPECT_EQ(c.largest_groups[0].requests, 3u);
  EXPECT_TRUE(c.largest_groups[0].candidate_in);
  EXPECT_TRUE(c.largest_groups[0].nested);
  EXPECT_EQ(c.largest_groups[0].waiting, 3u);   // X: two of X0, one of X1
  EXPECT_EQ(c.largest_groups[1].requests, 2u);  // X0
  EXPECT_FALSE(c.largest_groups[1].candidate_in);
  EXPECT_TRUE(c.largest_groups[1].nested);
  EXPECT_EQ(c.largest_groups[1].waiting, 2u);
  // Y0 grows to the largest leaf while X stays the largest branch: no longer nested.
  tracker.Enter(5, chain(2, 20, 10));
  tracker.Enter(6, chain(1, 12, 11));
  tracker.Enter(7, chain(1, 13, 12));
  tracker.BeginRound(std::vector<uint32_t>(8, 544));
  tracker.Fill(c, 9, cand, 544, 512, 99);
  EXPECT_EQ(c.largest_groups[0].requests, 5u);  // X
  EXPECT_EQ(c.largest_groups[1].requests, 3u);  // Y0
  EXPECT_FALSE(c.largest_groups[1].nested);
  EXPECT_EQ(c.largest_groups[1].waiting, 1u);
  // Admissions leave the count at every depth; the last one forgets the key.
  tracker.Waiting(chain(2, 20, 8), -1);
  tracker.Fill(c, 9, cand, 544, 512, 99);
  EXPECT_EQ(c.largest_groups[1].waiting, 0u);
  EXPECT_EQ(c.largest_groups[0].waiting, 3u);
}

}  // namespace
}  // namespace feather
