// fcfs_selector_test.cc: arrival order, preemption to the front, cancellation, id reuse.
#include "policies/fcfs_selector.h"

#include <gtest/gtest.h>

#include <deque>
#include <vector>

#include "base/rng.h"

namespace feather {
namespace {

RequestInfo Info(RequestId id) { return RequestInfo{id, {}, kNoPrefixGroup}; }

// Runs one round admitting up to `max_batch` proposals; returns them in admission order.
std::vector<RequestId> Round(CandidateSelector& s, size_t max_batch) {
  std::vector<RequestId> admitted;
  s.BeginRound();
  while (admitted.size() < max_batch) {
    const auto c = s.Next();
    if (!c) break;
    admitted.push_back(c->id);
    s.Admit(c->id);
  }
  return admitted;
}

TEST(FcfsSelector, ProposesInArrivalOrder) {
  FcfsSelector s;
  EXPECT_EQ(s.Name(), "fcfs");
  EXPECT_FALSE(s.Next().has_value());
  for (const RequestId id : {5u, 2u, 9u, 0u}) s.OnArrival(Info(id));
  EXPECT_EQ(s.NumWaiting(), 4u);
  EXPECT_EQ(s.WaitingOrder(), (std::vector<RequestId>{5, 2, 9, 0}));
  EXPECT_EQ(Round(s, 2), (std::vector<RequestId>{5, 2}));
  EXPECT_EQ(s.NumWaiting(), 2u);
  EXPECT_EQ(s.NumRunning(), 2u);
  s.OnArrival(Info(7));
  EXPECT_EQ(Round(s, 10), (std::vector<RequestId>{9, 0, 7}));
  EXPECT_EQ(s.NumWaiting(), 0u);
  EXPECT_FALSE(s.Next().has_value());
}

TEST(FcfsSelector, NextIsIdempotentUntilAdmit) {
  FcfsSelector s;
  s.OnArrival(Info(3));
  s.OnArrival(Info(4));
  ASSERT_EQ(s.Next()->id, 3u);
  ASSERT_EQ(s.Next()->id, 3u);
  EXPECT_FALSE(s.Next()->signal.has_value());
  s.Admit(3);
  EXPECT_EQ(s.Next()->id, 4u);
}

TEST(FcfsSelector, PreemptedRequestGoesToTheFront) {
  FcfsSelector s;
  for (RequestId id = 0; id < 6; ++id) s.OnArrival(Info(id));
  EXPECT_EQ(Round(s, 3), (std::vector<RequestId>{0, 1, 2}));
  // vLLM preempts the last admitted request first and prepends each victim: 2, then 1.
  s.OnPreempt(2);
  EXPECT_EQ(s.WaitingOrder(), (std::vector<RequestId>{2, 3, 4, 5}));
  s.OnPreempt(1);
  EXPECT_EQ(s.WaitingOrder(), (std::vector<RequestId>{1, 2, 3, 4, 5}));
  EXPECT_EQ(s.NumRunning(), 1u);
  EXPECT_EQ(Round(s, 3), (std::vector<RequestId>{1, 2, 3}));
  // A preempted request goes ahead of requests that arrived after it, too.
  s.OnArrival(Info(6));
  s.OnPreempt(3);
  EXPECT_EQ(s.WaitingOrder(), (std::vector<RequestId>{3, 4, 5, 6}));
}

TEST(FcfsSelector, CancelFromTheMiddleHeadAndTail) {
  FcfsSelector s;
  for (RequestId id = 0; id < 5; ++id) s.OnArrival(Info(id));
  s.OnCancel(2);
  EXPECT_EQ(s.WaitingOrder(), (std::vector<RequestId>{0, 1, 3, 4}));
  s.OnCancel(0);
  EXPECT_EQ(s.WaitingOrder(), (std::vector<RequestId>{1, 3, 4}));
  s.OnCancel(4);
  EXPECT_EQ(s.WaitingOrder(), (std::vector<RequestId>{1, 3}));
  EXPECT_EQ(s.NumWaiting(), 2u);
  EXPECT_EQ(Round(s, 10), (std::vector<RequestId>{1, 3}));
  s.OnArrival(Info(8));
  s.OnCancel(8);
  EXPECT_EQ(s.NumWaiting(), 0u);
  EXPECT_FALSE(s.Next().has_value());
}

TEST(FcfsSelector, FinishedAndCancelledIdsCanBeReused) {
  FcfsSelector s;
  s.OnArrival(Info(0));
  s.OnArrival(Info(1));
  s.OnArrival(Info(2));
  EXPECT_EQ(Round(s, 1), (std::vector<RequestId>{0}));
  s.OnFinish(0);
  s.OnCancel(1);
  s.OnArrival(Info(0));  // reused ids queue behind the requests already waiting
  s.OnArrival(Info(1));
  EXPECT_EQ(s.WaitingOrder(), (std::vector<RequestId>{2, 0, 1}));
  EXPECT_EQ(Round(s, 10), (std::vector<RequestId>{2, 0, 1}));
  EXPECT_EQ(s.NumRunning(), 3u);
}

TEST(FcfsSelector, MatchesADequeModelUnderRandomEvents) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Rng rng(seed);
    FcfsSelector s(4);
    std::deque<RequestId> waiting;
    std::vector<RequestId> running;
    std::vector<RequestId> free_ids;
    RequestId next_id = 0;
    for (int step = 0; step < 2000; ++step) {
      const uint64_t op = rng.Uniform(5);
      if (op == 0 || waiting.empty()) {
        RequestId id = next_id;
        if (!free_ids.empty() && rng.Uniform(2) == 0) {
          id = free_ids.back();
          free_ids.pop_back();
        } else {
          ++next_id;
        }
        s.OnArrival(Info(id));
        waiting.push_back(id);
      } else if (op == 1) {
        const auto it = waiting.begin() + static_cast<std::ptrdiff_t>(rng.Uniform(waiting.size()));
        s.OnCancel(*it);
        free_ids.push_back(*it);
        waiting.erase(it);
      } else if (op == 2 && !running.empty()) {
        const size_t i = rng.Uniform(running.size());
        s.OnFinish(running[i]);
        free_ids.push_back(running[i]);
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
      } else if (op == 3 && !running.empty()) {
        const size_t i = rng.Uniform(running.size());
        s.OnPreempt(running[i]);
        waiting.push_front(running[i]);
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        const std::vector<RequestId> admitted = Round(s, 1 + rng.Uniform(4));
        for (const RequestId id : admitted) {
          ASSERT_EQ(id, waiting.front()) << "seed " << seed << " step " << step;
          waiting.pop_front();
          running.push_back(id);
        }
      }
      ASSERT_EQ(s.NumWaiting(), waiting.size());
      ASSERT_EQ(s.WaitingOrder(), std::vector<RequestId>(waiting.begin(), waiting.end()));
    }
  }
}

TEST(FcfsSelectorDeathTest, RejectsEventsForRequestsInTheWrongState) {
  FcfsSelector s;
  s.OnArrival(Info(1));
  EXPECT_DEATH(s.OnArrival(Info(1)), "still in use");
  EXPECT_DEATH(s.OnFinish(1), "not running");
  EXPECT_DEATH(s.OnPreempt(1), "not running");
  EXPECT_DEATH(s.OnCancel(7), "not waiting");
  EXPECT_DEATH(s.OnArrival(Info(kNoRequest)), "reserved");
}

}  // namespace
}  // namespace feather
