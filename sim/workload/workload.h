// workload.h: the requests a run replays: arrival times, prompts with a controlled prefix-sharing
// structure, and output lengths. Generated from a WorkloadSpec and a seed (same spec and seed give
// the same workload bit for bit), or read from a Mooncake-format trace.
//
// Prompts are token ids (the selectors work on tokens) in a PromptStore (prompt_store.h): each
// distinct shared prefix stored once, then each request's own tokens, so memory follows the
// unique tokens of a workload, not the total. Arrival times are integer nanoseconds (simulated
// time). Generation is O(requests + stored tokens).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/workload/prompt_store.h"

namespace feather {

enum class ArrivalKind : uint8_t {
  kPoisson,    // exponential inter-arrival times at rate_per_s
  kPiecewise,  // Poisson whose rate changes by phase (e.g. 5 -> 10 -> 20 req/s)
  kOffline,    // every request at time 0
};

struct RatePhase {
  double duration_s = 0;  // the last phase lasts until every request has arrived
  double rate_per_s = 0;
};

struct ArrivalSpec {
  ArrivalKind kind = ArrivalKind::kPoisson;
  double rate_per_s = 100;
  std::vector<RatePhase> phases;  // kPiecewise only
};

enum class LengthKind : uint8_t { kFixed, kUniform, kLognormal };

// A token count: fixed, uniform on [min, max], or lognormal with the given mean and sigma (of
// the underlying normal) clamped to [min, max]. Always at least 1 (value and min must be >= 1).
// The lognormal's mean is that of the unclamped, unrounded draw: mu = ln(mean) - sigma^2 / 2.
struct LengthSpec {
  LengthKind kind = LengthKind::kFixed;
  uint32_t value = 100;  // kFixed
  uint32_t min = 1;      // kUniform, kLognormal
  uint32_t max = 1;
  double mean = 100;  // kLognormal: mean of the length itself
  double sigma = 0.5;
};

enum class SharingKind : uint8_t {
  kGroups,       // `groups` shared prefixes of prefix_tokens, then a unique suffix
  kRadix,        // a tree of `levels` levels, `branching` children, level_tokens per level
  kFractional,   // one common prefix covering shared_fraction of each prompt, then unique
  kTwoPrefixes,  // prefix A with probability shared_fraction, else prefix B, then unique
  kNone,         // every prompt unique
};

// How requests are spread over the groups: kEqual draws each request's group uniformly (sizes
// vary, ~±sqrt(n/groups)); kExact gives every group n/groups requests (the first n % groups one
// more), in a random arrival order, as the paper's Exps 3 and 6 ("same number of requests",
// "8 prefix groups with 100 requests each"); kZipf draws by popularity 1/rank^exponent.
enum class GroupSizes : uint8_t { kEqual, kZipf, kExact };

struct SharingSpec {
  SharingKind kind = SharingKind::kGroups;
  uint32_t groups = 5;
  uint32_t prefix_tokens = 5000;  // kGroups, kTwoPrefixes
  GroupSizes group_sizes = GroupSizes::kEqual;
  double zipf_exponent = 1.0;
  uint32_t levels = 1;  // kRadix
  uint32_t branching = 2;
  uint32_t level_tokens = 1000;
  double shared_fraction = 0.5;  // kFractional, kTwoPrefixes
};

// Replay of a Mooncake JSONL trace (../shared/traces/README.md).
struct TraceSpec {
  std::string path;
  double time_scale = 1.0;      // arrival times are multiplied by it (0.5 = twice as fast)
  uint64_t limit = 0;           // first `limit` requests only; 0 = all
  uint32_t block_tokens = 512;  // tokens per hash block (Mooncake: 512)
  // Closed-loop replay of conversations: a request that continues an earlier one (its
  // predecessor, Workload::predecessor) arrives at max(its trace time, the moment its predecessor
  // finished), as a user sends the next turn only after reading the answer to the last. The
  // trace's own arrivals are open-loop: replayed faster than the server answers, later turns
  // arrive while their predecessor still waits, which no user can do
  // (results/policy-suite/2026-12-07-trace-load/README.md measures what that does to reuse).
  bool closed_loop = false;
};

// A trace request's predecessor: the latest earlier request sharing the longest leading run of
// its block ids, if that run has at least kMinTurnBlocks blocks. Two, because in the Mooncake
// conversation trace block 0 is a system prompt common to every request and block 1 starts a
// conversation (as for the Oracle's groups below): one shared block says nothing about turns.
inline constexpr uint32_t kMinTurnBlocks = 2;

// Memory guards, checked before anything is generated (scenario validation for synthetic
// workloads, the trace reader for traces). They count prompt tokens as if every prompt were
// stored whole (4-byte ids), which bounds the work of a run (hashing, matching) and, with
// per-request state of a few hundred bytes, bounds its memory from above: the store keeps shared
// prefixes once (prompt_store.h), so a run with sharing uses far less. The defaults fit a
// machine with 8+ GB; a scenario's `limits:` section (or --set limits.KEY=N) raises them. See
// scenarios/README.md.
struct WorkloadLimits {
  uint64_t max_requests = 10'000'000;         // requests of a run
  uint64_t max_prompt_tokens = 1'000'000;     // tokens of one prompt (shared part included)
  uint64_t max_total_tokens = 1'000'000'000;  // prompt tokens of the whole run (4 GB of ids)
  // Not a memory guard: whether requests that can never be served (rejected by the simulator,
  // RunSummary::requests_unservable) are expected. When false, `feather run` exits 3 on them.
  bool allow_unservable = false;
};

struct WorkloadSpec {
  uint64_t requests = 1000;
  ArrivalSpec arrival;
  SharingSpec sharing;
  // Unique tokens after the shared part (kGroups, kRadix, kTwoPrefixes) or the whole prompt
  // length (kFractional, kNone).
  LengthSpec prompt_tokens;
  LengthSpec output_tokens;
  bool use_trace = false;
  TraceSpec trace;  // when use_trace; then arrival, sharing and lengths come from the trace
  WorkloadLimits limits;
};

// What generating `spec` would hold, estimated without generating it (synthetic workloads): the
// longest possible prompt (shared part + the length spec's upper bound) and the expected total
// of prompt tokens (shared part + the length spec's mean, times the requests). O(1).
struct WorkloadSize {
  uint64_t max_prompt_tokens = 0;
  double expected_total_tokens = 0;
};
[[nodiscard]] WorkloadSize EstimateWorkloadSize(const WorkloadSpec& spec);

// prompts.group, the Oracle selector's prefix group of each request:
//   kGroups       the group drawn for it, in [0, groups)
//   kRadix        its leaf index in [0, branching^levels) (the path's digits in base branching)
//   kFractional   0 (one common prefix)
//   kTwoPrefixes  0 for prefix A, 1 for prefix B
//   kNone         kNoPrefixGroup (policies/selector.h): every request is a group of its own
//   trace         dense ids in order of first appearance of the record's second block id (its
//                 first when it has a single block). In the Mooncake conversation trace block 0
//                 is a system prompt common to every request and block 1 starts a conversation,
//                 so this approximates the conversation (the trace carries no session ids):
//                 requests of one group share at least their first two blocks.
struct Workload {
  std::vector<int64_t> arrival_ns;      // non-decreasing
  std::vector<uint32_t> output_tokens;  // >= 1
  PromptStore prompts;                  // prompts.group = Oracle prefix group (above)
  // Closed-loop replay only (TraceSpec::closed_loop; empty otherwise): per request, the earlier
  // request it waits for (kMinTurnBlocks above), or kNoRequest. Always below the request's own id.
  std::vector<RequestId> predecessor;

  [[nodiscard]] size_t size() const { return arrival_ns.size(); }
};

// Throws std::invalid_argument for an inconsistent spec, and InputError (base/input_error.h, a
// std::runtime_error) naming the file, line and field for an unreadable or malformed trace.
//
// Synthetic: `spec.requests` requests (>= 1). Each part (arrivals, prompt lengths, output
// lengths, group picks, unique tokens) has its own random stream, so changing one part of the
// spec leaves the others unchanged. Unique tokens are random ids in [1, 2^31).
// Trace (use_trace): every record of the trace, or its first trace.limit; spec.requests and the
// seed are ignored (block id h always gives the same tokens, derived from h alone).
// arrival_ns = timestamp_ms * 1e6 * time_scale, rounded.
// Both refuse a workload over spec.limits before generating it (synthetic: std::invalid_argument;
// trace: the reader's InputError naming the line).
[[nodiscard]] Workload GenerateWorkload(const WorkloadSpec& spec, uint64_t seed);

}  // namespace feather
