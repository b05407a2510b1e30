// block_table_selector_test.cc: the vLLM block-table ("PAT") selector: a per-step order table on
// a small example; a differential test of the per-request block counts and the whole round
// order against a naive recomputation over token prefixes (no hashes); and a differential test
// of the incremental depths against the selector's former O(W·C) algorithm, which rescanned
// every waiting chain in BeginRound (kept here as RescanningSelector), over random operation
// sequences with small block alphabets and small free queues.
#include "policies/block_table_selector.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <initializer_list>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "base/rng.h"
#include "sim/workload/synthetic_prompts.h"

namespace feather {
namespace {

// A prompt of 4-token blocks, block b being tokens {10b, 10b+1, 10b+2, 10b+3}, plus `partial`
// tokens of an incomplete last block.
std::vector<Token> Blocks(std::initializer_list<int> blocks, int partial = 0) {
  std::vector<Token> tokens;
  for (const int b : blocks) {
    for (int t = 0; t < 4; ++t) tokens.push_back(10 * b + t);
  }
  for (int t = 0; t < partial; ++t) tokens.push_back(-1 - t);
  return tokens;
}

std::vector<RequestId> Admit(BlockTableSelector& s, size_t count) {
  std::vector<RequestId> admitted;
  while (admitted.size() < count) {
    const std::optional<Candidate> c = s.Next();
    if (!c) break;
    EXPECT_EQ(s.Next()->id, c->id);  // idempotent
    s.Admit(c->id);
    admitted.push_back(c->id);
  }
  return admitted;
}

std::vector<RequestId> Order(const BlockTableSelector& s) {
  return {s.RoundOrder().begin(), s.RoundOrder().end()};
}

TEST(BlockTableSelector, PerStepOrderTable) {
  BlockTableSelector s(BlockHashConfig{4, 0, 1});
  EXPECT_EQ(s.Name(), "block-table");
  // Block names: A1 = 1, A2 = 2, B1 = 3, B2 = 4, C = 5/6, D = 7/8, suffixes >= 20.
  std::deque<std::vector<Token>> prompts;  // stable storage for the spans
  auto arrive = [&](RequestId id, std::vector<Token> tokens) {
    prompts.push_back(std::move(tokens));
    s.OnArrival(RequestInfo{id, prompts.back(), kNoPrefixGroup});
  };
  arrive(0, Blocks({1, 2, 20}, 3));  // A1 A2 X1 + partial
  arrive(1, Blocks({3, 4, 21}));     // B1 B2 Y1
  arrive(2, Blocks({1, 2, 22}));     // A1 A2 X2
  arrive(3, Blocks({3, 4, 23}));     // B1 B2 Y2
  arrive(4, Blocks({1, 24}));        // A1 Z1
  arrive(5, Blocks({5, 6}));         // C1 C2: shares nothing
  arrive(6, Blocks({3, 4, 25}, 2));  // B1 B2 Y3 + partial
  EXPECT_EQ(s.Chain(0).size(), 3u);
  EXPECT_EQ(s.NumWaiting(), 7u);

  // Round 1, nothing running: groups by size: B2 {1 3 6}, A2 {0 2}, A1 {4}; then 5.
  s.BeginRound();
  EXPECT_EQ(Order(s), (std::vector<RequestId>{1, 3, 6, 0, 2, 4, 5}));
  EXPECT_EQ(s.RoundStats(0)->shared_blocks, 2u);
  EXPECT_EQ(s.RoundStats(4)->shared_blocks, 1u);
  EXPECT_EQ(s.RoundStats(5)->shared_blocks, 0u);
  EXPECT_EQ(s.RoundStats(1)->cached_blocks, 0u);
  EXPECT_EQ(Admit(s, 1), (std::vector<RequestId>{1}));

  // Round 2, running {1}: B2 {3 6} shares B1 B2 with the batch and goes first.
  s.BeginRound();
  EXPECT_EQ(Order(s), (std::vector<RequestId>{3, 6, 0, 2, 4, 5}));
  const BlockRoundStats r3 = *s.RoundStats(3);
  EXPECT_EQ(r3.cached_blocks, 2u);
  EXPECT_EQ(r3.running_blocks, 2u);
  EXPECT_EQ(r3.shared_blocks, 2u);
  EXPECT_EQ(Admit(s, 3), (std::vector<RequestId>{3, 6, 0}));
  EXPECT_FALSE(s.RoundStats(1).has_value());  // not waiting at the last BeginRound

  // Round 3, running {1 3 6 0}; new arrivals.
  arrive(7, Blocks({3, 4, 21}));      // identical to running request 1: 3 cached blocks
  arrive(8, Blocks({7, 8, 26}));      // D1 D2 W1
  arrive(9, Blocks({7, 8, 27}));      // D1 D2 W2
  arrive(10, Blocks({7, 8, 28}, 1));  // D1 D2 W3
  s.BeginRound();
  // Running-sharing groups by cached depth: {7} (3), {2} (A1 A2: 2), {4} (A1: 1); then the
  // larger non-running group D2 {8 9 10}; then 5.
  EXPECT_EQ(Order(s), (std::vector<RequestId>{7, 2, 4, 8, 9, 10, 5}));
  EXPECT_EQ(s.RoundStats(7)->cached_blocks, 3u);
  EXPECT_EQ(s.RoundStats(7)->shared_blocks, 3u);
  EXPECT_EQ(s.RoundStats(8)->running_blocks, 0u);
  EXPECT_EQ(s.RoundStats(8)->shared_blocks, 2u);
  EXPECT_EQ(Admit(s, 1), (std::vector<RequestId>{7}));
  s.OnCancel(2);  // cancelled after BeginRound: skipped
  EXPECT_EQ(Admit(s, 1), (std::vector<RequestId>{4}));

  // The B requests finish: their blocks stay cached in the free queue. Request 0 is preempted
  // (back to the front, its blocks freed but cached).
  s.OnFinish(1);
  s.OnFinish(3);
  s.OnFinish(6);
  s.OnFinish(7);
  s.OnPreempt(0);
  arrive(11, Blocks({3, 4, 23, 29}));  // B1 B2 Y2 + one more: a cache hit of 3 blocks
  arrive(12, Blocks({1, 2, 20, 30}));  // shares A1 A2 X1 with waiting 0
  s.BeginRound();
  // Running {4}: A1 is running, so {0 12} (shared A1 A2 X1; cached 3) is the only running-sharing
  // group; then D2; then requests sharing nothing (11 is cached but shares with no live request).
  EXPECT_EQ(Order(s), (std::vector<RequestId>{0, 12, 8, 9, 10, 5, 11}));
  EXPECT_EQ(s.RoundStats(0)->cached_blocks, 3u);
  EXPECT_EQ(s.RoundStats(0)->running_blocks, 1u);
  EXPECT_EQ(s.RoundStats(12)->shared_blocks, 3u);
  EXPECT_EQ(s.RoundStats(11)->cached_blocks, 3u);
  EXPECT_EQ(s.RoundStats(11)->shared_blocks, 0u);
  // Free (cached) blocks: B1 B2 Y1 Y2 Y3 from the finished requests, A2 X1 from the preemption
  // (A1 is still running for request 4).
  EXPECT_EQ(s.table().NumFreeQueueBlocks(), 7u);
  EXPECT_EQ(Admit(s, 10), (std::vector<RequestId>{0, 12, 8, 9, 10, 5, 11}));
  EXPECT_EQ(s.NumWaiting(), 0u);
  EXPECT_FALSE(s.Next().has_value());
  s.table().CheckInvariants();
}

TEST(BlockTableSelector, RequestsArrivingOrPreemptedMidRoundWaitForTheNextRound) {
  BlockTableSelector s(BlockHashConfig{4, 0, 1});
  const std::vector<Token> a = Blocks({1, 2});
  s.OnArrival(RequestInfo{0, a, kNoPrefixGroup});
  s.OnArrival(RequestInfo{1, a, kNoPrefixGroup});
  s.BeginRound();
  ASSERT_EQ(Admit(s, 1), (std::vector<RequestId>{0}));
  s.OnArrival(RequestInfo{2, a, kNoPrefixGroup});
  s.OnPreempt(0);
  EXPECT_EQ(Admit(s, 10), (std::vector<RequestId>{1}));
  EXPECT_EQ(s.NumWaiting(), 2u);
  s.BeginRound();
  EXPECT_EQ(Admit(s, 10), (std::vector<RequestId>{0, 2}));  // 0 back at the front

  // An id cancelled after BeginRound() and reused by a new arrival is not proposed in the old
  // request's place.
  const std::vector<Token> b = Blocks({5, 6});
  s.OnArrival(RequestInfo{3, a, kNoPrefixGroup});
  s.OnArrival(RequestInfo{4, b, kNoPrefixGroup});
  s.BeginRound();
  EXPECT_EQ(Order(s), (std::vector<RequestId>{3, 4}));
  s.OnCancel(3);
  s.OnArrival(RequestInfo{3, b, kNoPrefixGroup});
  EXPECT_EQ(Admit(s, 10), (std::vector<RequestId>{4}));
  s.BeginRound();
  EXPECT_EQ(Admit(s, 10), (std::vector<RequestId>{3}));
}

// Naive reference: a block is the token prefix it ends; no hashing.
class NaiveModel {
 public:
  using Key = std::vector<Token>;
  struct Request {
    std::vector<Token> prompt;
    int state = 0;  // 0 absent, 1 waiting, 2 running
    int64_t position = 0;
  };

  NaiveModel(uint32_t block, uint32_t capacity, size_t ids)
      : block_(block), capacity_(capacity), requests(ids) {}

  std::vector<Key> KeysOf(const std::vector<Token>& prompt) const {
    std::vector<Key> keys;
    for (size_t k = 1; k * block_ <= prompt.size(); ++k) {
      keys.emplace_back(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(k * block_));
    }
    return keys;
  }
  void Arrive(RequestId id, const std::vector<Token>& prompt) {
    requests[id] = {prompt, 1, back_++};
  }
  void Admit(RequestId id) {
    for (const Key& key : KeysOf(requests[id].prompt)) {
      const auto it = std::find(free_.begin(), free_.end(), key);
      if (it != free_.end()) free_.erase(it);
      ++running_[key];
    }
    requests[id].state = 2;
  }
  void Release(RequestId id, bool preempt) {
    const std::vector<Key> keys = KeysOf(requests[id].prompt);
    for (size_t i = keys.size(); i-- > 0;) {
      if (--running_[keys[i]] == 0) {
        running_.erase(keys[i]);
        free_.push_back(keys[i]);
      }
    }
    while (capacity_ != 0 && free_.size() > capacity_) free_.pop_front();
    requests[id].state = preempt ? 1 : 0;
    if (preempt) requests[id].position = front_--;
  }
  bool Cached(const Key& key) const {
    return running_.count(key) != 0 || std::find(free_.begin(), free_.end(), key) != free_.end();
  }
  bool SharedWithOther(RequestId self, const Key& key) const {
    if (running_.count(key) != 0) return true;
    for (RequestId v = 0; v < requests.size(); ++v) {
      const Request& r = requests[v];
      if (v != self && r.state == 1 && r.prompt.size() >= key.size() &&
          std::equal(key.begin(), key.end(), r.prompt.begin())) {
        return true;
      }
    }
    return false;
  }
  BlockRoundStats Stats(RequestId id) const {
    BlockRoundStats s;
    const std::vector<Key> keys = KeysOf(requests[id].prompt);
    while (s.cached_blocks < keys.size() && Cached(keys[s.cached_blocks])) ++s.cached_blocks;
    while (s.running_blocks < keys.size() && running_.count(keys[s.running_blocks]) != 0) {
      ++s.running_blocks;
    }
    while (s.shared_blocks < keys.size() && SharedWithOther(id, keys[s.shared_blocks])) {
      ++s.shared_blocks;
    }
    return s;
  }
  std::vector<RequestId> WaitingInQueueOrder() const {
    std::vector<RequestId> ids;
    for (RequestId id = 0; id < requests.size(); ++id) {
      if (requests[id].state == 1) ids.push_back(id);
    }
    std::sort(ids.begin(), ids.end(), [this](RequestId a, RequestId b) {
      return requests[a].position < requests[b].position;
    });
    return ids;
  }
  // The documented rule, written out directly.
  std::vector<RequestId> RoundOrder() const {
    struct Group {
      Key key;
      std::vector<RequestId> members;
      uint32_t cached = 0;
      uint32_t running = 0;
    };
    std::vector<Group> groups;
    std::vector<RequestId> loners;
    for (const RequestId id : WaitingInQueueOrder()) {
      const BlockRoundStats s = Stats(id);
      if (s.shared_blocks == 0) {
        loners.push_back(id);
        continue;
      }
      const Key key = KeysOf(requests[id].prompt)[s.shared_blocks - 1];
      auto it =
          std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.key == key; });
      if (it == groups.end()) {
        groups.push_back({key, {}, std::min(s.cached_blocks, s.shared_blocks), s.running_blocks});
        it = groups.end() - 1;
      }
      EXPECT_EQ(it->running, s.running_blocks);
      it->members.push_back(id);
    }
    // Groups are in order of first member; a stable sort keeps that as the last tie-break.
    std::stable_sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) {
      const int tier_a = a.running > 0 ? 0 : 1;
      const int tier_b = b.running > 0 ? 0 : 1;
      if (tier_a != tier_b) return tier_a < tier_b;
      if (tier_a == 0 && a.cached != b.cached) return a.cached > b.cached;
      return a.members.size() > b.members.size();
    });
    std::vector<RequestId> order;
    for (const Group& g : groups) order.insert(order.end(), g.members.begin(), g.members.end());
    order.insert(order.end(), loners.begin(), loners.end());
    return order;
  }

 private:
  uint32_t block_;
  uint32_t capacity_;
  std::map<Key, int> running_;
  std::deque<Key> free_;  // least recently freed first
  int64_t back_ = 0;
  int64_t front_ = -1;

 public:
  std::vector<Request> requests;
};

void RunRandomDifferential(uint64_t seed) {
  Rng rng(seed);
  const uint32_t block = rng.Uniform(2) == 0 ? 4 : 16;
  const uint32_t capacities[] = {0, 1, 3, 8, 40};
  const uint32_t capacity = capacities[rng.Uniform(5)];
  RadixShape shape;
  shape.levels = 1 + static_cast<uint32_t>(rng.Uniform(3));
  shape.branching = 2 + static_cast<uint32_t>(rng.Uniform(2));
  shape.tokens_per_level = static_cast<uint32_t>(block / 2 + rng.Uniform(block * 2));
  shape.unique_suffix_tokens = static_cast<uint32_t>(rng.Uniform(2) == 0 ? 0 : rng.Uniform(20));
  const PromptSet pool = MakeRadixPrompts(shape, 40, seed);
  SCOPED_TRACE(testing::Message() << "seed " << seed << " block " << block << " capacity "
                                  << capacity << " levels " << shape.levels << " branching "
                                  << shape.branching << " level tokens " << shape.tokens_per_level
                                  << " suffix " << shape.unique_suffix_tokens);

  const size_t kIds = 32;
  BlockTableSelector s(BlockHashConfig{block, capacity, seed});
  NaiveModel model(block, capacity, kIds);
  auto pick = [&](int state) -> std::optional<RequestId> {
    std::vector<RequestId> ids;
    for (RequestId id = 0; id < kIds; ++id) {
      if (model.requests[id].state == state) ids.push_back(id);
    }
    if (ids.empty()) return std::nullopt;
    return ids[rng.Uniform(ids.size())];
  };

  for (int step = 0; step < 300; ++step) {
    const uint64_t op = rng.Uniform(100);
    if (op < 35) {
      if (const auto id = pick(0)) {
        const std::span<const Token> prompt = pool.Prompt(rng.Uniform(pool.size()));
        s.OnArrival(RequestInfo{*id, prompt, kNoPrefixGroup});
        model.Arrive(*id, std::vector<Token>(prompt.begin(), prompt.end()));
        ASSERT_EQ(s.Chain(*id).size(), prompt.size() / block);
      }
    } else if (op < 55) {
      if (const auto id = pick(2)) {
        s.OnFinish(*id);
        model.Release(*id, false);
      }
    } else if (op < 63) {
      if (const auto id = pick(2)) {
        s.OnPreempt(*id);
        model.Release(*id, true);
      }
    } else if (op < 73) {
      if (const auto id = pick(1)) {
        s.OnCancel(*id);
        model.requests[*id].state = 0;
      }
    } else {
      s.BeginRound();
      const std::vector<RequestId> expected = model.RoundOrder();
      ASSERT_EQ(Order(s), expected) << "step " << step;
      for (const RequestId id : expected) {
        const BlockRoundStats want = model.Stats(id);
        const BlockRoundStats got = *s.RoundStats(id);
        ASSERT_EQ(got.cached_blocks, want.cached_blocks) << "step " << step << " id " << id;
        ASSERT_EQ(got.running_blocks, want.running_blocks) << "step " << step << " id " << id;
        ASSERT_EQ(got.shared_blocks, want.shared_blocks) << "step " << step << " id " << id;
      }
      // Admit a prefix of the order, sometimes cancelling a later entry mid-round.
      size_t next = 0;
      for (uint64_t k = rng.Uniform(6); k > 0; --k) {
        if (next + 1 < expected.size() && rng.Uniform(5) == 0) {
          s.OnCancel(expected[next]);
          model.requests[expected[next]].state = 0;
          ++next;
        }
        const std::optional<Candidate> c = s.Next();
        if (next == expected.size()) {
          ASSERT_FALSE(c.has_value());
          break;
        }
        ASSERT_TRUE(c.has_value());
        ASSERT_EQ(c->id, expected[next]);
        s.Admit(c->id);
        model.Admit(c->id);
        ++next;
      }
    }
    ASSERT_EQ(s.NumWaiting(), model.WaitingInQueueOrder().size());
    s.CheckInvariants();
    s.table().CheckInvariants();
  }
}

TEST(BlockTableSelector, MatchesANaiveTokenPrefixRecomputation) {
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    RunRandomDifferential(seed);
    if (HasFatalFailure()) return;
  }
}

// The selector before incremental depths, kept as the brute-force reference: BeginRound probes
// the table for every block of every waiting chain until its three leading runs end (O(W·C)),
// then groups, sorts and places exactly as the header describes.
class RescanningSelector {
 public:
  RescanningSelector(const BlockHashConfig& config, size_t ids) : table_(config), requests_(ids) {}

  const BlockHashTable& table() const { return table_; }
  size_t NumWaiting() const { return num_waiting_; }
  std::span<const RequestId> RoundOrder() const { return order_; }
  std::optional<BlockRoundStats> RoundStats(RequestId id) const {
    if (round_ == 0 || requests_[id].round != round_) return std::nullopt;
    return requests_[id].stats;
  }

  void OnArrival(RequestId id, std::span<const Token> prompt) {
    Request& r = requests_[id];
    r.chain = table_.ComputeChain(prompt);
    r.state = State::kWaiting;
    r.round = 0;
    r.position = back_++;
    table_.AddWaiting(r.chain);
    ++num_waiting_;
  }
  void Admit(RequestId id) {
    Request& r = requests_[id];
    table_.Admit(r.chain);
    r.state = State::kRunning;
    --num_waiting_;
    if (cursor_ < order_.size() && order_[cursor_] == id) ++cursor_;
  }
  void OnFinish(RequestId id) {
    table_.Release(requests_[id].chain);
    requests_[id].state = State::kAbsent;
  }
  void OnPreempt(RequestId id) {
    Request& r = requests_[id];
    table_.Preempt(r.chain);
    r.state = State::kWaiting;
    r.round = 0;
    r.position = front_--;
    ++num_waiting_;
  }
  void OnCancel(RequestId id) {
    table_.RemoveWaiting(requests_[id].chain);
    requests_[id].state = State::kAbsent;
    --num_waiting_;
  }
  std::optional<RequestId> Next() {
    while (cursor_ < order_.size()) {
      const Request& r = requests_[order_[cursor_]];
      if (r.state == State::kWaiting && r.round == round_) return order_[cursor_];
      ++cursor_;
    }
    return std::nullopt;
  }

  void BeginRound() {
    ++round_;
    order_.clear();
    cursor_ = 0;
    std::vector<RequestId> queue;
    for (RequestId id = 0; id < requests_.size(); ++id) {
      if (requests_[id].state == State::kWaiting) queue.push_back(id);
    }
    std::sort(queue.begin(), queue.end(), [this](RequestId a, RequestId b) {
      return requests_[a].position < requests_[b].position;
    });
    struct Group {
      uint32_t size = 0;
      uint32_t cached = 0;
      uint32_t running = 0;
      uint32_t first_index = 0;
    };
    std::vector<Group> groups;
    std::map<PrefixHash, uint32_t> group_of_hash;
    std::vector<uint32_t> group_of(queue.size(), kNone);
    for (uint32_t i = 0; i < queue.size(); ++i) {
      Request& r = requests_[queue[i]];
      r.round = round_;
      r.stats = Measure(r.chain);
      const BlockRoundStats& st = r.stats;
      if (st.shared_blocks == 0) continue;
      const auto [it, inserted] = group_of_hash.emplace(r.chain[st.shared_blocks - 1],
                                                        static_cast<uint32_t>(groups.size()));
      if (inserted) {
        groups.push_back({0, std::min(st.cached_blocks, st.shared_blocks), st.running_blocks, i});
      }
      group_of[i] = it->second;
      ++groups[it->second].size;
    }
    std::vector<uint32_t> rank(groups.size());
    for (uint32_t g = 0; g < groups.size(); ++g) rank[g] = g;
    std::sort(rank.begin(), rank.end(), [&](uint32_t a, uint32_t b) {
      const Group& ga = groups[a];
      const Group& gb = groups[b];
      const bool a_running = ga.running > 0;
      const bool b_running = gb.running > 0;
      if (a_running != b_running) return a_running;
      if (a_running && ga.cached != gb.cached) return ga.cached > gb.cached;
      if (ga.size != gb.size) return ga.size > gb.size;
      return ga.first_index < gb.first_index;
    });
    for (const uint32_t g : rank) {
      for (uint32_t i = 0; i < queue.size(); ++i) {
        if (group_of[i] == g) order_.push_back(queue[i]);
      }
    }
    for (uint32_t i = 0; i < queue.size(); ++i) {
      if (group_of[i] == kNone) order_.push_back(queue[i]);
    }
  }

 private:
  static constexpr uint32_t kNone = 0xffffffffu;
  enum class State { kAbsent, kWaiting, kRunning };
  struct Request {
    std::vector<PrefixHash> chain;
    State state = State::kAbsent;
    int64_t position = 0;
    uint64_t round = 0;
    BlockRoundStats stats;
  };

  BlockRoundStats Measure(const std::vector<PrefixHash>& chain) const {
    BlockRoundStats stats;
    bool cached = true;
    bool running = true;
    bool shared = true;
    for (size_t i = 0; i < chain.size() && (cached || running || shared); ++i) {
      const BlockRecord* block = table_.Find(chain[i]);
      cached = cached && block->cached;
      running = running && block->running_refs > 0;
      shared = shared && block->waiting_refs + block->running_refs >= 2;
      stats.cached_blocks += cached ? 1 : 0;
      stats.running_blocks += running ? 1 : 0;
      stats.shared_blocks += shared ? 1 : 0;
    }
    return stats;
  }

  BlockHashTable table_;
  std::vector<Request> requests_;
  size_t num_waiting_ = 0;
  int64_t back_ = 0;
  int64_t front_ = -1;
  uint64_t round_ = 0;
  std::vector<RequestId> order_;
  size_t cursor_ = 0;
};

// Prompts over a tiny block alphabet that extend each other's prefixes, so that chains share
// deeply and often: each new prompt is a random leading part of an earlier one (or nothing)
// followed by random blocks whose tokens come from `alphabet` values.
std::deque<std::vector<Token>> MakeOverlappingPrompts(Rng& rng, size_t count, uint32_t block,
                                                      uint32_t alphabet, uint32_t max_blocks) {
  std::deque<std::vector<Token>> prompts;
  for (size_t i = 0; i < count; ++i) {
    std::vector<Token> tokens;
    if (!prompts.empty() && rng.Uniform(4) != 0) {
      const std::vector<Token>& base = prompts[rng.Uniform(prompts.size())];
      const size_t keep = rng.Uniform(base.size() / block + 1) * block;
      tokens.assign(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(keep));
    }
    const size_t target_blocks = rng.Uniform(max_blocks + 1);
    while (tokens.size() / block < target_blocks) {
      tokens.push_back(static_cast<Token>(rng.Uniform(alphabet)));
    }
    for (uint64_t t = rng.Uniform(block); t > 0; --t) tokens.push_back(-1);  // partial block
    prompts.push_back(std::move(tokens));
  }
  return prompts;
}

void RunAgainstRescanning(uint64_t seed) {
  Rng rng(seed);
  const uint32_t blocks[] = {1, 2, 4};
  const uint32_t block = blocks[rng.Uniform(3)];
  const uint32_t capacities[] = {0, 1, 2, 3, 5, 8, 16};
  const uint32_t capacity = capacities[rng.Uniform(7)];
  const uint32_t alphabet = 2 + static_cast<uint32_t>(rng.Uniform(2));
  const uint32_t max_blocks = 2 + static_cast<uint32_t>(rng.Uniform(9));
  const std::deque<std::vector<Token>> pool =
      MakeOverlappingPrompts(rng, 6 + rng.Uniform(20), block, alphabet, max_blocks);
  SCOPED_TRACE(testing::Message() << "seed " << seed << " block " << block << " capacity "
                                  << capacity << " alphabet " << alphabet << " max blocks "
                                  << max_blocks << " prompts " << pool.size());

  const size_t kIds = 24;
  const BlockHashConfig config{block, capacity, seed};
  BlockTableSelector s(config);
  RescanningSelector ref(config, kIds);
  std::vector<int> state(kIds, 0);  // 0 absent, 1 waiting, 2 running
  auto pick = [&](int wanted) -> std::optional<RequestId> {
    std::vector<RequestId> ids;
    for (RequestId id = 0; id < kIds; ++id) {
      if (state[id] == wanted) ids.push_back(id);
    }
    if (ids.empty()) return std::nullopt;
    return ids[rng.Uniform(ids.size())];
  };

  for (int step = 0; step < 400; ++step) {
    const uint64_t op = rng.Uniform(100);
    if (op < 30) {
      if (const auto id = pick(0)) {
        const std::vector<Token>& prompt = pool[rng.Uniform(pool.size())];
        s.OnArrival(RequestInfo{*id, prompt, kNoPrefixGroup});
        ref.OnArrival(*id, prompt);
        state[*id] = 1;
      }
    } else if (op < 45) {
      if (const auto id = pick(2)) {
        s.OnFinish(*id);
        ref.OnFinish(*id);
        state[*id] = 0;
      }
    } else if (op < 53) {
      if (const auto id = pick(2)) {
        s.OnPreempt(*id);
        ref.OnPreempt(*id);
        state[*id] = 1;
      }
    } else if (op < 61) {
      if (const auto id = pick(1)) {
        s.OnCancel(*id);
        ref.OnCancel(*id);
        state[*id] = 0;
      }
    } else if (op < 73) {
      s.BeginRound();
      ref.BeginRound();
      ASSERT_EQ(Order(s), std::vector<RequestId>(ref.RoundOrder().begin(), ref.RoundOrder().end()))
          << "step " << step;
      for (RequestId id = 0; id < kIds; ++id) {
        const std::optional<BlockRoundStats> got = s.RoundStats(id);
        const std::optional<BlockRoundStats> want = ref.RoundStats(id);
        ASSERT_EQ(got.has_value(), want.has_value()) << "step " << step << " id " << id;
        if (!got) continue;
        ASSERT_EQ(got->cached_blocks, want->cached_blocks) << "step " << step << " id " << id;
        ASSERT_EQ(got->running_blocks, want->running_blocks) << "step " << step << " id " << id;
        ASSERT_EQ(got->shared_blocks, want->shared_blocks) << "step " << step << " id " << id;
      }
    } else {
      // Admit the current proposal, if any (rounds interleave with the events above).
      const std::optional<Candidate> c = s.Next();
      const std::optional<RequestId> want = ref.Next();
      ASSERT_EQ(c.has_value(), want.has_value()) << "step " << step;
      if (c) {
        ASSERT_EQ(c->id, *want) << "step " << step;
        s.Admit(c->id);
        ref.Admit(c->id);
        state[c->id] = 2;
      }
    }
    const std::optional<Candidate> next = s.Next();
    const std::optional<RequestId> want_next = ref.Next();
    ASSERT_EQ(next.has_value(), want_next.has_value()) << "step " << step;
    if (next) {
      ASSERT_EQ(next->id, *want_next) << "step " << step;
    }
    ASSERT_EQ(s.NumWaiting(), ref.NumWaiting()) << "step " << step;
    ASSERT_EQ(s.table().FreeQueue(), ref.table().FreeQueue()) << "step " << step;
    ASSERT_EQ(s.table().evictions(), ref.table().evictions()) << "step " << step;
    s.CheckInvariants();
    s.table().CheckInvariants();
  }
}

TEST(BlockTableSelector, IncrementalDepthsMatchTheRescanningSelector) {
  for (uint64_t seed = 1; seed <= 400; ++seed) {
    RunAgainstRescanning(seed);
    if (HasFatalFailure()) return;
  }
}

// The table features the incremental depths rely on: the change log names exactly the blocks
// whose facts changed while waiting requests still reference them. (The *Slots forms are checked
// against the hash forms by the differential test above: the selector uses the first, the
// reference the second, and their free queues are compared after every step.)
TEST(BlockTableSelector, TableChangeLogNamesBlocksThatWaitingRequestsSeeChange) {
  const std::vector<Token> a = Blocks({1, 2});  // A1 A2
  const std::vector<Token> b = Blocks({1, 3});  // A1 B2
  BlockHashTable quiet(BlockHashConfig{4, 1, 1});
  BlockHashTable table(BlockHashConfig{4, 1, 1});
  table.EnableChangeLog();
  const std::vector<PrefixHash> ca = table.ComputeChain(a);
  const std::vector<PrefixHash> cb = table.ComputeChain(b);
  std::vector<uint32_t> sa;
  std::vector<uint32_t> sb;
  table.AddWaiting(ca, sa);
  quiet.AddWaiting(ca);
  ASSERT_EQ(sa.size(), 2u);
  EXPECT_EQ(&table.Record(sa[0]), table.Find(ca[0]));
  EXPECT_TRUE(table.ChangedSlots().empty());  // new blocks: nothing changed for anyone
  table.AddWaiting(cb, sb);
  quiet.AddWaiting(cb);
  EXPECT_EQ(sb[0], sa[0]);
  EXPECT_EQ(std::vector<uint32_t>(table.ChangedSlots().begin(), table.ChangedSlots().end()),
            std::vector<uint32_t>{sa[0]});  // A1 became shared
  EXPECT_EQ(table.Record(sa[0]).Flags(), 4);
  table.ClearChangedSlots();

  table.AdmitSlots(sa);  // A1 cached and running for waiting b; A2 has no waiting reference
  quiet.Admit(ca);
  EXPECT_EQ(std::vector<uint32_t>(table.ChangedSlots().begin(), table.ChangedSlots().end()),
            std::vector<uint32_t>{sa[0]});
  EXPECT_EQ(table.Record(sa[0]).Flags(), 7);
  table.ClearChangedSlots();

  table.ReleaseSlots(sa);  // A1 no longer running or shared; A2 evicted (capacity 1), unwatched
  quiet.Release(ca);
  EXPECT_EQ(std::vector<uint32_t>(table.ChangedSlots().begin(), table.ChangedSlots().end()),
            std::vector<uint32_t>{sa[0]});
  EXPECT_EQ(table.Record(sa[0]).Flags(), 1);
  EXPECT_EQ(table.evictions(), 1u);
  EXPECT_EQ(table.FreeQueue(), quiet.FreeQueue());
  table.ClearChangedSlots();

  table.RemoveWaitingSlots(sb);  // the last waiting references go: nothing to report
  quiet.RemoveWaiting(cb);
  EXPECT_TRUE(table.ChangedSlots().empty());
  EXPECT_TRUE(quiet.ChangedSlots().empty());  // the log is off unless enabled
  EXPECT_EQ(table.NumRecords(), quiet.NumRecords());
  table.CheckInvariants();
}

TEST(BlockTableSelector, ChainsSurviveArenaCompaction) {
  const PromptSet prompts = MakeGroupedPrompts(64, 4, 512, 100, 3);  // 38 blocks each
  BlockTableSelector s;
  const BlockHashTable reference;
  Rng rng(5);
  std::vector<int> prompt_of(16, -1);
  for (int step = 0; step < 2000; ++step) {
    const RequestId id = static_cast<RequestId>(rng.Uniform(16));
    if (prompt_of[id] < 0) {
      prompt_of[id] = static_cast<int>(rng.Uniform(prompts.size()));
      s.OnArrival(RequestInfo{id, prompts.Prompt(static_cast<size_t>(prompt_of[id])), 0});
    } else if (rng.Uniform(2) == 0) {
      s.OnCancel(id);
      prompt_of[id] = -1;
    } else {
      s.BeginRound();
      while (const auto c = s.Next()) s.Admit(c->id);
      s.OnFinish(id);
      prompt_of[id] = -1;
      for (RequestId other = 0; other < 16; ++other) {
        if (prompt_of[other] >= 0) {
          s.OnFinish(other);
          prompt_of[other] = -1;
        }
      }
    }
    for (RequestId other = 0; other < 16; ++other) {
      if (prompt_of[other] < 0) continue;
      const std::vector<PrefixHash> want =
          reference.ComputeChain(prompts.Prompt(static_cast<size_t>(prompt_of[other])));
      ASSERT_TRUE(
          std::equal(want.begin(), want.end(), s.Chain(other).begin(), s.Chain(other).end()))
          << "step " << step;
    }
    s.CheckInvariants();  // depths and lists survive the arena's moves
  }
  EXPECT_GT(s.MemoryBytes(), sizeof(BlockTableSelector));
  s.CheckInvariants();
  s.table().CheckInvariants();
}

TEST(BlockTableSelectorDeathTest, RejectsEventsForRequestsInTheWrongState) {
  BlockTableSelector s;
  const std::vector<Token> a = Blocks({1, 2, 3, 4});
  s.OnArrival(RequestInfo{0, a, kNoPrefixGroup});
  EXPECT_DEATH(s.OnArrival(RequestInfo{0, a, kNoPrefixGroup}), "still in use");
  EXPECT_DEATH(s.OnFinish(0), "not running");
  EXPECT_DEATH(s.OnPreempt(0), "not running");
  EXPECT_DEATH(s.OnCancel(1), "not waiting");
}

}  // namespace
}  // namespace feather
