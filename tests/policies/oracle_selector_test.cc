// oracle_selector_test.cc: per-step expected-order tables for the Oracle (caller-provided
// prefix groups) selector, and a differential test against a brute-force rescan.
#include "policies/oracle_selector.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "base/rng.h"

namespace feather {
namespace {

constexpr uint32_t kSingle = kNoPrefixGroup;

enum class Op { kArrive, kAdmit, kFinish, kPreempt, kCancel };

// One row: apply `op` to `id` (kArrive: in `group`; kAdmit: `id` must be the current proposal),
// then expect Next() to propose `expect` (kNoRequest: nothing).
struct Step {
  Op op;
  RequestId id;
  uint32_t group;
  RequestId expect;
};

void RunTable(const std::vector<Step>& steps) {
  OracleSelector s;
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& step = steps[i];
    SCOPED_TRACE(testing::Message() << "step " << i);
    switch (step.op) {
      case Op::kArrive:
        s.OnArrival(RequestInfo{step.id, {}, step.group});
        break;
      case Op::kAdmit: {
        const std::optional<Candidate> c = s.Next();
        ASSERT_TRUE(c.has_value());
        ASSERT_EQ(c->id, step.id);
        s.Admit(step.id);
        break;
      }
      case Op::kFinish:
        s.OnFinish(step.id);
        break;
      case Op::kPreempt:
        s.OnPreempt(step.id);
        break;
      case Op::kCancel:
        s.OnCancel(step.id);
        break;
    }
    s.CheckInvariants();
    s.BeginRound();
    const std::optional<Candidate> next = s.Next();
    ASSERT_EQ(next.has_value() ? next->id : kNoRequest, step.expect);
  }
}

TEST(OracleSelector, ContinuesTheRunningGroupThenTheNextLargest) {
  RunTable({
      {Op::kArrive, 0, 0, 0},  // g0: [0]
      {Op::kArrive, 1, 1, 0},  // g1: [1]        tie on size: oldest head (0) first
      {Op::kArrive, 2, 1, 1},  // g1: [1 2]      g1 is now the largest
      {Op::kArrive, 3, 0, 0},  // g0: [0 3]      tie 2:2, g0's head arrived first
      {Op::kArrive, 4, 1, 1},  // g1: [1 2 4]
      {Op::kArrive, 5, 0, 0},  // g0: [0 3 5]    tie 3:3 again
      {Op::kArrive, 6, 0, 0},  // g0: [0 3 5 6]
      {Op::kAdmit, 0, 0, 3},   // batch {g0}: continue g0
      {Op::kAdmit, 3, 0, 5},
      {Op::kArrive, 7, 1, 5},  // g1 grows to 4 waiting, but the batch is g0's
      {Op::kArrive, 8, 1, 5},  // g1: 5 waiting vs g0's 2
      {Op::kAdmit, 5, 0, 6},
      {Op::kAdmit, 6, 0, 1},  // g0 exhausted: move to g1 (the only group left)
      {Op::kAdmit, 1, 1, 2},
      {Op::kAdmit, 2, 1, 4},
      {Op::kAdmit, 4, 1, 7},
      {Op::kAdmit, 7, 1, 8},
      {Op::kAdmit, 8, 1, kNoRequest},
  });
}

TEST(OracleSelector, SwitchesToTheLargestWaitingGroupAndStaysThere) {
  RunTable({
      {Op::kArrive, 0, 0, 0},
      {Op::kArrive, 1, 0, 0},
      {Op::kAdmit, 0, 0, 1},
      {Op::kAdmit, 1, 0, kNoRequest},  // g0 running 2, nothing waiting
      {Op::kArrive, 2, 1, 2},          // g1: [2]
      {Op::kArrive, 3, 2, 2},          // g2: [3]           tie 1:1, oldest head
      {Op::kArrive, 4, 2, 3},          // g2: [3 4]         g2 largest
      {Op::kArrive, 5, 1, 2},          // g1: [2 5]         tie 2:2, g1's head is older
      {Op::kArrive, 6, 2, 3},          // g2: [3 4 6]
      {Op::kArrive, 7, 1, 2},          // g1: [2 5 7]       tie 3:3, g1 older
      {Op::kArrive, 8, 1, 2},          // g1: [2 5 7 8]
      {Op::kAdmit, 2, 1, 5},           // g1 now runs one request: keep to it
      {Op::kAdmit, 5, 1, 7},           // although g2 has more waiting (3 vs 2)
      {Op::kArrive, 9, 2, 7},
      {Op::kAdmit, 7, 1, 8},
      {Op::kAdmit, 8, 1, 3},  // g1 exhausted: g2 (the only waiting group)
      {Op::kFinish, 0, 0, 3},
      {Op::kArrive, 10, 0, 10},  // g0 runs 1 request, g2 none: g0's lone request first
      {Op::kFinish, 1, 0, 3},    // g0 runs none now: g2 (4 waiting) beats g0 (1)
      {Op::kAdmit, 3, 2, 4},
      {Op::kAdmit, 4, 2, 6},
      {Op::kAdmit, 6, 2, 9},
      {Op::kAdmit, 9, 2, 10},
      {Op::kAdmit, 10, 0, kNoRequest},
  });
}

TEST(OracleSelector, PrefersTheGroupWithMoreRunningRequests) {
  RunTable({
      {Op::kArrive, 0, 0, 0},
      {Op::kArrive, 1, 0, 0},
      {Op::kArrive, 2, 0, 0},
      {Op::kArrive, 3, 1, 0},
      {Op::kAdmit, 0, 0, 1},
      {Op::kAdmit, 1, 0, 2},
      {Op::kAdmit, 2, 0, 3},
      {Op::kAdmit, 3, 1, kNoRequest},  // running: g0 3, g1 1
      {Op::kArrive, 4, 1, 4},          // only g1 waits
      {Op::kArrive, 5, 0, 5},          // g0 has the most running requests: it wins
      {Op::kArrive, 6, 2, 5},
      {Op::kArrive, 7, 2, 5},  // g2 has 2 waiting, none running: still g0
      {Op::kAdmit, 5, 0, 4},   // g0 exhausted: g1 runs 1, g2 runs 0
      {Op::kFinish, 3, 1, 6},  // g1 runs none now: g2's 2 waiting beat g1's 1
      {Op::kAdmit, 6, 2, 7},
      {Op::kAdmit, 7, 2, 4},
      {Op::kAdmit, 4, 1, kNoRequest},
  });
}

TEST(OracleSelector, SingletonRequestsComeAfterGroupsInArrivalOrder) {
  RunTable({
      {Op::kArrive, 0, kSingle, 0},
      {Op::kArrive, 1, 3, 0},  // g3: [1]: ties with singleton 0, 0 arrived first
      {Op::kArrive, 2, kSingle, 0},
      {Op::kArrive, 3, 3, 1},  // g3: [1 3] beats every singleton
      {Op::kAdmit, 1, 3, 3},
      {Op::kAdmit, 3, 3, 0},  // then singletons and 1-request groups by arrival
      {Op::kArrive, 4, 5, 0},
      {Op::kAdmit, 0, kSingle, 2},  // a running singleton never pulls anything after it
      {Op::kAdmit, 2, kSingle, 4},
      {Op::kArrive, 5, kSingle, 4},
      {Op::kCancel, 4, 5, 5},
      {Op::kAdmit, 5, kSingle, kNoRequest},
  });
}

TEST(OracleSelector, PreemptedRequestsGoToTheFront) {
  RunTable({
      {Op::kArrive, 0, 0, 0},
      {Op::kArrive, 1, 0, 0},
      {Op::kArrive, 2, 0, 0},
      {Op::kArrive, 3, 1, 0},
      {Op::kArrive, 4, 1, 0},
      {Op::kArrive, 5, 1, 0},
      {Op::kAdmit, 0, 0, 1},
      {Op::kAdmit, 1, 0, 2},
      {Op::kAdmit, 2, 0, 3},
      {Op::kAdmit, 3, 1, 4},
      {Op::kPreempt, 3, 1, 3},  // g1: [3 4 5], back at its front; g0 runs 3 but has none waiting
      {Op::kPreempt, 2, 0, 2},  // g0: [2] and runs 2 requests, g1 none: g0 first
      {Op::kPreempt, 1, 0, 1},  // g0: [1 2] (prepended), runs 1; g1 runs 0
      {Op::kAdmit, 1, 0, 2},
      {Op::kAdmit, 2, 0, 3},
      {Op::kCancel, 4, 1, 3},
      {Op::kAdmit, 3, 1, 5},
      {Op::kAdmit, 5, 1, kNoRequest},
  });
}

TEST(OracleSelector, CountsPerGroup) {
  OracleSelector s;
  EXPECT_EQ(s.Name(), "oracle");
  for (RequestId id = 0; id < 5; ++id) s.OnArrival(RequestInfo{id, {}, id % 2});
  EXPECT_EQ(s.NumWaiting(), 5u);
  EXPECT_EQ(s.WaitingInGroup(0), 3u);
  EXPECT_EQ(s.WaitingInGroup(1), 2u);
  EXPECT_EQ(s.WaitingInGroup(7), 0u);
  ASSERT_EQ(s.Next()->id, 0u);
  s.Admit(0);
  EXPECT_EQ(s.RunningInGroup(0), 1u);
  EXPECT_EQ(s.WaitingInGroup(0), 2u);
  EXPECT_EQ(s.NumWaiting(), 4u);
  EXPECT_GT(s.MemoryBytes(), sizeof(OracleSelector));
}

// Brute force: rescans every request for every decision.
struct OracleModel {
  struct R {
    uint32_t group = 0;  // caller group, or a unique singleton key
    int64_t position = 0;
    int state = 0;  // 0 absent, 1 waiting, 2 running
  };
  std::vector<R> requests;
  int64_t back = 0;
  int64_t front = -1;

  RequestId Next() const {
    RequestId best = kNoRequest;
    auto count = [&](uint32_t group, int state) {
      uint32_t n = 0;
      for (const R& r : requests) n += (r.state == state && r.group == group) ? 1 : 0;
      return n;
    };
    auto head = [&](uint32_t group) {
      RequestId h = kNoRequest;
      for (RequestId i = 0; i < requests.size(); ++i) {
        if (requests[i].state == 1 && requests[i].group == group &&
            (h == kNoRequest || requests[i].position < requests[h].position)) {
          h = i;
        }
      }
      return h;
    };
    for (RequestId i = 0; i < requests.size(); ++i) {
      if (requests[i].state != 1 || head(requests[i].group) != i) continue;
      if (best == kNoRequest) {
        best = i;
        continue;
      }
      const uint32_t ga = requests[i].group;
      const uint32_t gb = requests[best].group;
      const uint32_t ra = count(ga, 2), rb = count(gb, 2);
      const uint32_t wa = count(ga, 1), wb = count(gb, 1);
      if (ra != rb ? ra > rb
                   : (wa != wb ? wa > wb : requests[i].position < requests[best].position)) {
        best = i;
      }
    }
    return best;
  }
};

TEST(OracleSelector, MatchesABruteForceRescanUnderRandomEvents) {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    Rng rng(seed);
    OracleSelector s;
    OracleModel model;
    const uint32_t groups = 1 + static_cast<uint32_t>(rng.Uniform(5));
    const RequestId max_ids = 40;
    model.requests.resize(max_ids);
    uint32_t singleton_key = 1000;
    for (int step = 0; step < 1500; ++step) {
      const RequestId id = static_cast<RequestId>(rng.Uniform(max_ids));
      OracleModel::R& r = model.requests[id];
      const uint64_t op = rng.Uniform(6);
      if (r.state == 0) {
        const bool single = rng.Uniform(4) == 0;
        const uint32_t group = single ? kSingle : static_cast<uint32_t>(rng.Uniform(groups));
        s.OnArrival(RequestInfo{id, {}, group});
        r = {single ? singleton_key++ : group, model.back++, 1};
      } else if (r.state == 1 && op == 0) {
        s.OnCancel(id);
        r.state = 0;
      } else if (r.state == 2 && op <= 1) {
        s.OnFinish(id);
        r.state = 0;
      } else if (r.state == 2 && op == 2) {
        s.OnPreempt(id);
        r.state = 1;
        r.position = model.front--;
      } else {
        // Admit a few proposals.
        s.BeginRound();
        for (uint64_t k = rng.Uniform(3); k > 0; --k) {
          const RequestId expect = model.Next();
          const std::optional<Candidate> c = s.Next();
          ASSERT_EQ(c.has_value() ? c->id : kNoRequest, expect) << "seed " << seed;
          if (!c) break;
          s.Admit(c->id);
          model.requests[c->id].state = 2;
        }
      }
      s.CheckInvariants();
      const std::optional<Candidate> c = s.Next();
      ASSERT_EQ(c.has_value() ? c->id : kNoRequest, model.Next())
          << "seed " << seed << " step " << step;
    }
  }
}

TEST(OracleSelectorDeathTest, RejectsEventsForRequestsInTheWrongState) {
  OracleSelector s;
  s.OnArrival(RequestInfo{2, {}, 0});
  EXPECT_DEATH(s.OnArrival(RequestInfo{2, {}, 1}), "still in use");
  EXPECT_DEATH(s.OnFinish(2), "not running");
  EXPECT_DEATH(s.OnCancel(3), "not waiting");
  EXPECT_DEATH(s.OnArrival(RequestInfo{3, {}, 1u << 30}), "dense");
}

}  // namespace
}  // namespace feather
