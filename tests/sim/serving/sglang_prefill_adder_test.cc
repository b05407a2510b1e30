// Unit tests of SglangPrefillAdmit: each rule of SGLang 0.5.6's PrefillAdder on a hand-worked state.
#include "sim/serving/sglang_prefill_adder.h"

#include <gtest/gtest.h>

#include <vector>

namespace feather {
namespace {

SglangAdderState Big() {
  SglangAdderState s;
  s.available_tokens = 100000;
  return s;
}

TEST(SglangPrefillAdder, RunningRequestsReserveRatioTimesRemainingOutput) {
  SglangAdderState s = Big();
  s.available_tokens = 10000;
  s.new_token_ratio = 0.5;
  // Two running requests, 4000 output tokens left each: 0.5 * 8000 = 4000 reserved.
  const std::vector<int64_t> running = {4000, 4000};
  // Each new request needs 1000 input + 1000 output = 2000; 6000 left -> 2 fit (2000 < 6000,
  // 2000 < 4000), the third needs 2000 >= 2000 -> NO_TOKEN.
  const std::vector<SglangWaitingReq> waiting(4, {1000, 1000, 0});
  EXPECT_EQ(SglangPrefillAdmit(s, running, waiting).admitted.size(), 2u);
  s.new_token_ratio = 0.25;  // 2000 reserved, 8000 left: 2000<8000, <6000, <4000, 2000 -> no
  EXPECT_EQ(SglangPrefillAdmit(s, running, waiting).admitted.size(), 3u);
}

TEST(SglangPrefillAdder, OutputEstimateIsClipped) {
  SglangAdderState s = Big();
  s.available_tokens = 6000;
  s.new_token_ratio = 1.0;
  const std::vector<int64_t> running = {100000};  // clipped to 4096
  const std::vector<SglangWaitingReq> waiting = {{100, 100000, 0}};  // 100 + 4096 >= 1904
  EXPECT_TRUE(SglangPrefillAdmit(s, running, waiting).admitted.empty());
  s.available_tokens = 4096 + 4096 + 101;
  EXPECT_EQ(SglangPrefillAdmit(s, running, waiting).admitted.size(), 1u);
}

TEST(SglangPrefillAdder, PrefixHitCountsAgainstNoBudget) {
  SglangAdderState s = Big();
  s.rem_input_tokens = 1000;
  s.rem_chunk_tokens = -1;
  // extend_input_len already excludes the prefix: 300-token tails of long cached prompts.
  const std::vector<SglangWaitingReq> waiting(5, {300, 10, 0});
  // 300, 600, 900 admitted; the 4th: 300 >= 100 left and the batch is non-empty -> OTHER.
  EXPECT_EQ(SglangPrefillAdmit(s, {}, waiting).admitted.size(), 3u);
}

TEST(SglangPrefillAdder, FirstRequestIgnoresInputBudgetAndLongOneIsChunked) {
  SglangAdderState s = Big();
  s.rem_input_tokens = 100;
  s.rem_chunk_tokens = 64;
  s.page_size = 16;
  const std::vector<SglangWaitingReq> waiting = {{1000, 10, 0}, {10, 10, 0}};
  const SglangAdmission a = SglangPrefillAdmit(s, {}, waiting);
  ASSERT_EQ(a.admitted.size(), 1u);
  EXPECT_EQ(a.chunked_len, 64);
}

TEST(SglangPrefillAdder, MaxRunningRequestsCountsTheRunningBatch) {
  SglangAdderState s = Big();
  s.max_running_requests = 5;
  const std::vector<int64_t> running = {1, 1, 1};
  const std::vector<SglangWaitingReq> waiting(10, {10, 10, 0});
  EXPECT_EQ(SglangPrefillAdmit(s, running, waiting).admitted.size(), 2u);
}

TEST(SglangPrefillAdder, RetractedRequestReservesOnlyItsRemainingOutput) {
  SglangAdderState s = Big();
  s.available_tokens = 2000;
  s.new_token_ratio = 1.0;
  // total_tokens uses max_new - output_len: 500 + (1500 - 1000) = 1000 < 2000.
  EXPECT_EQ(SglangPrefillAdmit(s, {}, std::vector<SglangWaitingReq>{{500, 1500, 1000}}).admitted.size(), 1u);
  EXPECT_TRUE(SglangPrefillAdmit(s, {}, std::vector<SglangWaitingReq>{{500, 1500, 0}}).admitted.empty());
}

TEST(SglangPrefillAdder, ChunkedRequestComesFirstAndTakesTheChunkBudget) {
  SglangAdderState s = Big();
  s.rem_chunk_tokens = 1000;
  SglangPrefillAdder adder(s, 0);
  // add_chunked_req: min(rem_chunk 1000, rem_total 100000) of its 2500 left; truncated, so no
  // output is reserved; the chunk budget is spent, so the next request cannot be chunked in.
  EXPECT_EQ(adder.AddChunked(2500, 300), 1000);
  const SglangPrefillAdder::Outcome o = adder.TryAdd({10, 10, 0});
  EXPECT_FALSE(o.admitted);
  EXPECT_EQ(o.result, SglangAddResult::kOther);
  // The last chunk fits whole: it reserves its clipped output too.
  SglangPrefillAdder last(s, 0);
  EXPECT_EQ(last.AddChunked(400, 300), 400);
  s.available_tokens = 400 + 300 + 100;  // 100 left: a 50 + 60 request no longer fits
  SglangPrefillAdder tight(s, 0);
  EXPECT_EQ(tight.AddChunked(400, 300), 400);
  EXPECT_EQ(tight.TryAdd({50, 60, 0}).result, SglangAddResult::kNoToken);
}

TEST(SglangPrefillAdder, LockedEvictablePrefixCountsAgainstTheRequest) {
  SglangAdderState s = Big();
  s.available_tokens = 1000;
  // 300 + 200 < 1000, but locking a 600-token evictable hit leaves 400: NO_TOKEN.
  SglangPrefillAdder adder(s, 0);
  EXPECT_EQ(adder.TryAdd({300, 200, 0}, 600).result, SglangAddResult::kNoToken);
  SglangPrefillAdder unlocked(s, 0);
  EXPECT_TRUE(unlocked.TryAdd({300, 200, 0}, 400).admitted);
}

}  // namespace
}  // namespace feather
