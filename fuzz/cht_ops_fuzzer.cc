// cht_ops_fuzzer.cc: libFuzzer target holding the Chunked Hash Tree (cht/chunked_hash_tree.h)
// equal to its brute-force reference (cht/reference_cht.h) over operation sequences the fuzzer
// chooses.
//
// Input (FuzzedDataProvider): the tree's configuration (chunk size 1..8, hash scheme, one unused
// byte that was a re-pricing threshold, tiny initial capacities so every table grows), then up
// to 256 operations:
// Insert (a fresh id or a recycled one; the prompt is a prefix of an earlier prompt, possibly
// empty, plus a few tokens from a 3-token alphabet, so prompts share, branch and end inside
// chunks), AddToBatch of FindBest's proposal or of any waiting request, Finish, Remove (of a
// waiting or a parked request), Requeue, Park (of FindBest's proposal or of any waiting
// request), Unpark. Only valid operations are applied (ids are picked from the reference's
// waiting, active and parked lists). After every operation the tree's invariants are recomputed and
// every observable (tip, waiting and active counts, each waiting request's missing count,
// FindBest's candidate, its stability) must equal the reference's; a difference aborts with the
// operation number.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "base/check.h"
#include "cht/chunked_hash_tree.h"
#include "cht/prefix_hash.h"
#include "cht/reference_cht.h"

namespace feather {
namespace {

constexpr size_t kMaxLive = 32;
constexpr int kMaxOps = 256;
constexpr size_t kMaxPromptTokens = 96;

[[noreturn]] void Mismatch(int op, const char* what, uint64_t got, uint64_t want) {
  std::fprintf(stderr, "cht_ops_fuzzer: after operation %d: %s: tree %llu, reference %llu\n", op,
               what, static_cast<unsigned long long>(got), static_cast<unsigned long long>(want));
  std::abort();
}

void Compare(ChunkedHashTree& tree, const ReferenceCht& ref, int op) {
  tree.CheckInvariants();
  if (tree.TipLevel() != ref.TipLevel()) Mismatch(op, "tip", tree.TipLevel(), ref.TipLevel());
  const std::vector<RequestId> waiting = ref.Waiting();
  const std::vector<RequestId> active = ref.Active();
  if (tree.NumWaiting() != waiting.size()) {
    Mismatch(op, "waiting", tree.NumWaiting(), waiting.size());
  }
  if (tree.NumActive() != active.size()) Mismatch(op, "active", tree.NumActive(), active.size());
  for (const RequestId id : waiting) {
    FEATHER_CHECK(tree.IsWaiting(id), "a reference-waiting request is not waiting in the tree");
    if (tree.MissingCount(id) != ref.MissingCount(id)) {
      Mismatch(op, "missing count", tree.MissingCount(id), ref.MissingCount(id));
    }
  }
  for (const RequestId id : ref.Parked()) {
    FEATHER_CHECK(tree.IsParked(id), "a reference-parked request is not parked in the tree");
  }
  for (const RequestId id : active) {
    FEATHER_CHECK(tree.IsActive(id), "a reference-active request is not active in the tree");
  }
  const auto want = ref.FindBest();
  const auto got = tree.FindBest();
  if (got.has_value() != want.has_value())
    Mismatch(op, "has best", got.has_value(), want.has_value());
  if (!want) return;
  if (got->request != want->request) Mismatch(op, "best request", got->request, want->request);
  if (got->missing != want->missing) Mismatch(op, "best missing", got->missing, want->missing);
  if (got->tip_before != want->tip_before) {
    Mismatch(op, "tip_before", got->tip_before, want->tip_before);
  }
  if (got->tip_after != want->tip_after) Mismatch(op, "tip_after", got->tip_after, want->tip_after);
  if (got->peers != want->peers) Mismatch(op, "peers", got->peers, want->peers);
  FEATHER_CHECK(tree.FindBest() == got, "FindBest changed without a mutation");
}

RequestId Pick(FuzzedDataProvider& in, const std::vector<RequestId>& ids) {
  return ids[in.ConsumeIntegralInRange<size_t>(0, ids.size() - 1)];
}

}  // namespace
}  // namespace feather

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace feather;
  FuzzedDataProvider in(data, size);
  ChtConfig config;
  config.chunk_tokens = in.ConsumeIntegralInRange<uint32_t>(1, 8);
  const bool chained = in.ConsumeBool();
  const bool striped = in.ConsumeBool();  // formerly the sorted-run threshold's byte
  const bool aes = in.ConsumeBool();
  config.hash_scheme = chained   ? HashScheme::kChained
                       : striped ? HashScheme::kStriped
                       : aes     ? HashScheme::kAes
                                 : HashScheme::kStreaming;
  config.expected_requests = 2;
  config.expected_chunks = 4;
  ChunkedHashTree tree(config);
  ReferenceCht ref;
  std::vector<std::vector<Token>> prompts;  // every prompt inserted so far (sharing sources)
  std::vector<RequestId> free_ids;
  RequestId next_id = 0;
  std::vector<PrefixHash> hashes;

  for (int op = 0; op < kMaxOps && in.remaining_bytes() > 0; ++op) {
    const std::vector<RequestId> waiting = ref.Waiting();
    const std::vector<RequestId> active = ref.Active();
    const std::vector<RequestId> parked = ref.Parked();
    switch (in.ConsumeIntegralInRange<int>(0, 8)) {
      case 0:
      case 1: {  // Insert
        if (waiting.size() + active.size() + parked.size() >= kMaxLive) break;
        RequestId id = next_id;
        if (!free_ids.empty() && in.ConsumeBool()) {
          const size_t i = in.ConsumeIntegralInRange<size_t>(0, free_ids.size() - 1);
          id = free_ids[i];
          free_ids.erase(free_ids.begin() + static_cast<std::ptrdiff_t>(i));
        } else {
          ++next_id;
        }
        std::vector<Token> prompt;
        if (!prompts.empty() && in.ConsumeBool()) {
          const std::vector<Token>& base =
              prompts[in.ConsumeIntegralInRange<size_t>(0, prompts.size() - 1)];
          prompt.assign(base.begin(),
                        base.begin() + static_cast<std::ptrdiff_t>(
                                           in.ConsumeIntegralInRange<size_t>(0, base.size())));
        }
        const size_t extra = in.ConsumeIntegralInRange<size_t>(0, 3 * config.chunk_tokens);
        for (size_t k = 0; k < extra && prompt.size() < kMaxPromptTokens; ++k) {
          prompt.push_back(in.ConsumeIntegralInRange<Token>(0, 2));
        }
        tree.Insert(id, prompt);
        ComputePrefixHashes(config.hash_scheme, prompt, config.chunk_tokens, hashes);
        ref.InsertHashes(id, hashes);
        prompts.push_back(std::move(prompt));
        break;
      }
      case 2: {  // AddToBatch(FindBest)
        if (waiting.empty()) break;
        const auto best = tree.FindBest();
        FEATHER_CHECK(best.has_value(), "no candidate while requests wait");
        tree.AddToBatch(best->request);
        ref.AddToBatch(best->request);
        break;
      }
      case 3: {  // AddToBatch(any waiting)
        if (waiting.empty()) break;
        const RequestId id = Pick(in, waiting);
        tree.AddToBatch(id);
        ref.AddToBatch(id);
        break;
      }
      case 4: {  // Finish
        if (active.empty()) break;
        const RequestId id = Pick(in, active);
        tree.Finish(id);
        ref.Finish(id);
        free_ids.push_back(id);
        break;
      }
      case 5: {  // Remove (a parked request too: cancelled mid-round)
        if (waiting.empty() && parked.empty()) break;
        const bool from_parked = waiting.empty() || (!parked.empty() && in.ConsumeBool());
        const RequestId id = Pick(in, from_parked ? parked : waiting);
        tree.Remove(id);
        ref.Remove(id);
        free_ids.push_back(id);
        break;
      }
      case 6: {  // Requeue
        if (active.empty()) break;
        const RequestId id = Pick(in, active);
        tree.Requeue(id);
        ref.Requeue(id);
        break;
      }
      case 7: {  // Park (a round passing over FindBest's proposal, or over any waiting request)
        if (waiting.empty()) break;
        const RequestId id = in.ConsumeBool() ? tree.FindBest()->request : Pick(in, waiting);
        tree.Park(id);
        ref.Park(id);
        break;
      }
      case 8: {  // Unpark
        if (parked.empty()) break;
        const RequestId id = Pick(in, parked);
        tree.Unpark(id);
        ref.Unpark(id);
        break;
      }
      default:
        break;
    }
    Compare(tree, ref, op);
  }
  return 0;
}
