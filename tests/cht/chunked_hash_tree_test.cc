// chunked_hash_tree_test.cc: ChunkedHashTree against the brute-force ReferenceCht, plus the
// hand-worked examples of the paper's appendix.
#include "cht/chunked_hash_tree.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cht/reference_cht.h"
#include "tests/cht/cht_test_support.h"

namespace feather {
namespace {

std::vector<PrefixHash> Hashes(const std::vector<Token>& tokens, uint32_t chunk) {
  std::vector<PrefixHash> out;
  ComputeStreamingHashes(tokens, chunk, out);
  return out;
}

// Compares every observable of the two implementations.
void ExpectSame(ChunkedHashTree& tree, const ReferenceCht& ref, const std::string& where) {
  tree.CheckInvariants();
  ASSERT_EQ(tree.TipLevel(), ref.TipLevel()) << where;
  ASSERT_EQ(tree.LevelSharedByAll(), ref.LevelSharedByAll()) << where;
  const auto waiting = ref.Waiting();
  ASSERT_EQ(tree.NumWaiting(), waiting.size()) << where;
  ASSERT_EQ(tree.NumActive(), ref.Active().size()) << where;
  ASSERT_EQ(tree.NumRetained(), ref.Retained().size()) << where;
  for (RequestId id : ref.Retained()) ASSERT_TRUE(tree.IsRetained(id)) << where << " id " << id;
  for (RequestId id : waiting) {
    ASSERT_TRUE(tree.IsWaiting(id)) << where;
    ASSERT_EQ(tree.MissingCount(id), ref.MissingCount(id)) << where << " id " << id;
  }
  for (RequestId id : ref.Parked()) {
    ASSERT_TRUE(tree.IsParked(id) && !tree.IsWaiting(id)) << where << " id " << id;
  }
  const auto expected = ref.FindBest();
  const auto actual = tree.FindBest();
  ASSERT_EQ(actual.has_value(), expected.has_value()) << where;
  if (expected) {
    EXPECT_EQ(actual->request, expected->request) << where;
    EXPECT_EQ(actual->missing, expected->missing) << where;
    EXPECT_EQ(actual->tip_before, expected->tip_before) << where;
    EXPECT_EQ(actual->tip_after, expected->tip_after) << where;
    EXPECT_EQ(actual->peers, expected->peers) << where;
    ASSERT_EQ(tree.FindBest(), actual) << "FindBest must be stable without a mutation";
  }
}

enum class Op {
  kInsert, kAddBest, kAddAny, kFinish, kRetain, kForget, kRemove, kRequeue, kPark, kUnpark
};

Op PickOp(Rng& rng) {
  const uint64_t r = rng.Uniform(100);
  if (r < 28) return Op::kInsert;
  if (r < 50) return Op::kAddBest;
  if (r < 56) return Op::kAddAny;
  if (r < 66) return Op::kFinish;
  if (r < 72) return Op::kRetain;  // a completion whose KV the engine still caches
  if (r < 76) return Op::kForget;  // the cache evicts it
  if (r < 83) return Op::kRemove;
  if (r < 89) return Op::kRequeue;
  if (r < 95) return Op::kPark;  // a round passing over its proposal (or any waiting request)
  return Op::kUnpark;
}

RequestId PickFrom(Rng& rng, const std::vector<RequestId>& ids) {
  return ids[rng.Uniform(ids.size())];
}

// One random operation sequence; ids are recycled as requests leave, as the simulator does.
void RunSequence(uint64_t seed, uint32_t chunk, int ops) {
  testing::RadixPromptSource source(seed, chunk);
  ChtConfig config;
  config.chunk_tokens = chunk;
  config.expected_requests = 8;
  config.expected_chunks = 16;  // small on purpose: exercises table growth
  ChunkedHashTree tree(config);
  ReferenceCht ref;
  std::vector<RequestId> free_ids;
  RequestId next_id = 0;
  Rng& rng = source.rng();
  for (int step = 0; step < ops; ++step) {
    const auto waiting = ref.Waiting();
    const auto active = ref.Active();
    const auto parked = ref.Parked();
    const auto retained = ref.Retained();
    const Op op = PickOp(rng);
    std::string where = "seed " + std::to_string(seed) + " chunk " + std::to_string(chunk) +
                        " step " + std::to_string(step) + " op " +
                        std::to_string(static_cast<int>(op));
    if (op == Op::kInsert &&
        waiting.size() + active.size() + parked.size() + retained.size() < 24) {
      RequestId id = next_id;
      if (!free_ids.empty() && rng.Uniform(2) == 0) {
        id = free_ids.back();
        free_ids.pop_back();
      } else {
        ++next_id;
      }
      const auto prompt = source.Next();
      tree.Insert(id, prompt);
      ref.InsertHashes(id, Hashes(prompt, chunk));
    } else if (op == Op::kAddBest && !waiting.empty()) {
      const auto best = tree.FindBest();
      ASSERT_TRUE(best.has_value()) << where;
      tree.AddToBatch(best->request);
      ref.AddToBatch(best->request);
    } else if (op == Op::kAddAny && !waiting.empty()) {
      const RequestId id = PickFrom(rng, waiting);
      tree.AddToBatch(id);
      ref.AddToBatch(id);
    } else if (op == Op::kFinish && !active.empty()) {
      const RequestId id = PickFrom(rng, active);
      tree.Finish(id);
      ref.Finish(id);
      free_ids.push_back(id);
    } else if (op == Op::kRetain && !active.empty()) {
      const RequestId id = PickFrom(rng, active);
      tree.Retain(id);
      ref.Retain(id);
    } else if (op == Op::kForget && !retained.empty()) {
      const RequestId id = PickFrom(rng, retained);
      tree.Forget(id);
      ref.Forget(id);
      free_ids.push_back(id);
    } else if (op == Op::kRemove && (!waiting.empty() || !parked.empty())) {
      const bool from_parked = waiting.empty() || (!parked.empty() && rng.Uniform(2) == 0);
      const RequestId id = PickFrom(rng, from_parked ? parked : waiting);
      tree.Remove(id);
      ref.Remove(id);
      free_ids.push_back(id);
    } else if (op == Op::kRequeue && !active.empty()) {
      const RequestId id = PickFrom(rng, active);
      tree.Requeue(id);
      ref.Requeue(id);
    } else if (op == Op::kPark && !waiting.empty()) {
      const RequestId id =
          rng.Uniform(2) == 0 ? tree.FindBest().value().request : PickFrom(rng, waiting);
      tree.Park(id);
      ref.Park(id);
    } else if (op == Op::kUnpark && !parked.empty()) {
      const RequestId id = PickFrom(rng, parked);
      tree.Unpark(id);
      ref.Unpark(id);
    }
    ExpectSame(tree, ref, where);
    if (::testing::Test::HasFatalFailure() || ::testing::Test::HasNonfatalFailure()) return;
  }
}

class ChtDifferential : public ::testing::TestWithParam<uint32_t> {};

// 4 chunk sizes x 2,500 sequences = 10,000 random operation sequences, every operation checked.
TEST_P(ChtDifferential, MatchesBruteForceAfterEveryOperation) {
  const uint32_t chunk = GetParam();
  for (uint64_t seed = 1; seed <= 2500; ++seed) {
    RunSequence(seed * 7919 + chunk, chunk, 60);
    if (HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(ChunkSizes, ChtDifferential, ::testing::Values(1u, 16u, 50u, 256u));

// The appendix's alternative-heuristic example: level 1 shared by all, level 2 splits into R1 |
// R2,R3 | R4. With R1 and R2 active the tip is level 1; R3 misses fewer chunks than R4, so
// FindBest picks R3, and after R1 finishes the tip extends to level 2.
TEST(ChunkedHashTree, AppendixAlternativeHeuristicExample) {
  ChtConfig config;
  config.chunk_tokens = 2;
  ChunkedHashTree tree(config);
  const std::vector<Token> r1 = {1, 1, 2, 2}, r2 = {1, 1, 3, 3}, r3 = {1, 1, 3, 3},
                           r4 = {1, 1, 4, 4};
  tree.Insert(1, r1);
  tree.Insert(2, r2);
  tree.Insert(3, r3);
  tree.Insert(4, r4);
  tree.AddToBatch(1);
  EXPECT_EQ(tree.TipLevel(), 2u);
  tree.AddToBatch(2);
  EXPECT_EQ(tree.TipLevel(), 1u);
  const auto best = tree.FindBest();
  ASSERT_TRUE(best);
  EXPECT_EQ(best->request, 3u);
  EXPECT_EQ(best->missing, 0u);
  EXPECT_EQ(best->tip_before, 1u);
  EXPECT_EQ(best->tip_after, 1u);
  EXPECT_EQ(best->peers, 2u);  // R3 and R4 share level 1
  EXPECT_EQ(tree.MissingCount(4), 1u);
  tree.AddToBatch(3);
  tree.Finish(1);
  EXPECT_EQ(tree.TipLevel(), 2u);
}

// A round that passes over its proposal parks it: FindBest names the next request, the peer
// count leaves the parked one out, and unparking gives it back its place in the order.
TEST(ChunkedHashTree, ParkingTheProposalNamesTheNextAndUnparkingRestoresTheOrder) {
  ChtConfig config;
  config.chunk_tokens = 2;
  ChunkedHashTree tree(config);
  tree.Insert(1, std::vector<Token>{1, 1, 2, 2});
  tree.Insert(2, std::vector<Token>{1, 1, 3, 3});
  tree.Insert(3, std::vector<Token>{1, 1, 3, 3});
  tree.AddToBatch(1);
  ASSERT_EQ(tree.FindBest()->request, 2u);  // ties at one missing chunk: the older one
  EXPECT_EQ(tree.FindBest()->peers, 2u);
  tree.Park(2);
  EXPECT_TRUE(tree.IsParked(2));
  EXPECT_FALSE(tree.IsWaiting(2));
  EXPECT_EQ(tree.NumWaiting(), 1u);
  ASSERT_EQ(tree.FindBest()->request, 3u);
  EXPECT_EQ(tree.FindBest()->peers, 1u);
  tree.Park(3);
  EXPECT_FALSE(tree.FindBest().has_value());
  tree.Unpark(3);
  tree.Unpark(2);
  EXPECT_EQ(tree.FindBest()->request, 2u);  // its insertion order, not its unparking order
  tree.Park(2);
  tree.Remove(2);  // a parked request can leave (cancelled mid-round)
  EXPECT_FALSE(tree.IsParked(2));
  EXPECT_EQ(tree.FindBest()->request, 3u);
  tree.CheckInvariants();
}

TEST(ChunkedHashTree, FirstAdmissionSetsTipToFullLengthAndSecondCutsIt) {
  ChtConfig config;
  config.chunk_tokens = 2;
  ChunkedHashTree tree(config);
  tree.Insert(0, std::vector<Token>{5, 5, 6, 6, 7});  // 3 chunks, last one partial
  tree.Insert(1, std::vector<Token>{5, 5, 6, 6, 8, 8});
  auto best = tree.FindBest();
  ASSERT_TRUE(best);
  EXPECT_EQ(best->request, 0u);  // equal missing counts: earliest inserted wins
  EXPECT_EQ(best->peers, 2u);
  tree.AddToBatch(0);
  EXPECT_EQ(tree.TipLevel(), 3u);
  best = tree.FindBest();
  ASSERT_TRUE(best);
  EXPECT_EQ(best->request, 1u);
  EXPECT_EQ(best->missing, 1u);
  EXPECT_EQ(best->tip_after, 2u);
  EXPECT_EQ(best->peers, 1u);
  tree.AddToBatch(1);
  EXPECT_EQ(tree.TipLevel(), 2u);
  tree.Finish(0);
  EXPECT_EQ(tree.TipLevel(), 3u);
  tree.Finish(1);
  EXPECT_EQ(tree.TipLevel(), 0u);
  EXPECT_EQ(tree.NumNodes(), 1u);  // only the root is left
}

TEST(ChunkedHashTree, SharedPrefixIsOneNodeWhateverItsLength) {
  ChtConfig config;
  config.chunk_tokens = 1;
  ChunkedHashTree tree(config);
  std::vector<Token> prefix(20000, 7);
  for (RequestId id = 0; id < 4; ++id) {
    std::vector<Token> prompt = prefix;
    prompt.push_back(static_cast<Token>(100 + id));
    tree.Insert(id, prompt);
  }
  EXPECT_EQ(tree.NumNodes(), 1u + 1u + 4u);  // root, the 20K-chunk prefix, four leaves
  tree.CheckInvariants();
}

TEST(ChunkedHashTree, InsertHashesAcceptsTraceBlockIds) {
  ChtConfig config;
  config.chunk_tokens = 512;
  ChunkedHashTree tree(config);
  tree.InsertHashes(0, std::vector<PrefixHash>{0, 1, 2});
  tree.InsertHashes(1, std::vector<PrefixHash>{0, 1, 3, 4});
  tree.AddToBatch(0);
  EXPECT_EQ(tree.MissingCount(1), 2u);
  const auto best = tree.FindBest();
  ASSERT_TRUE(best);
  EXPECT_EQ(best->tip_after, 2u);
}

}  // namespace
}  // namespace feather
