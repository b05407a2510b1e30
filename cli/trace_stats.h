// trace_stats.h: `feather trace-stats TRACE [--json] [--block-tokens N] [--limit N] [--bin-s S]`:
// what a researcher needs to know about a Mooncake-format trace (sim/workload/trace_reader.h) before
// replaying it.
//
// Reports: requests, duration (last − first arrival), mean rate and the rate over time (requests
// per bin), input and output length distributions (mean, min, p50, p90, p99, max), and prefix
// sharing, counted in trace order with an unbounded cache (as ../shared/traces/README.md does):
// the share of blocks whose id appeared in an earlier request (overall, token-weighted, and
// without block 0), the number of distinct first blocks, and the depth of sharing: per request,
// how many leading blocks were seen before (distribution and histogram), and at depths 1, 2, 4,
// ... blocks, how many distinct prefixes there are and how many requests share theirs with
// another request.
//
// ComputeTraceStats is O(total blocks) time and O(unique blocks) memory.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/workload/trace_reader.h"

namespace feather {

struct Distribution {
  uint64_t count = 0;
  double mean = 0;
  uint64_t min = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;  // nearest-rank percentiles
};

struct SharingDepth {
  uint32_t depth_blocks = 0;     // prefix length in blocks
  uint64_t requests = 0;         // requests with at least that many blocks
  uint64_t distinct = 0;         // distinct prefixes of that length among them
  uint64_t shared_requests = 0;  // requests whose prefix of that length another request has too
};

struct TraceStats {
  std::string file;
  uint32_t block_tokens = 0;
  uint64_t requests = 0;
  double duration_s = 0;  // last − first timestamp
  double mean_rate_per_s = 0;
  uint64_t distinct_timestamps = 0;
  uint64_t max_requests_per_timestamp = 0;
  double bin_s = 0;
  std::vector<uint64_t> requests_per_bin;  // arrivals in [first + i·bin_s, first + (i+1)·bin_s)

  Distribution input_tokens, output_tokens;
  uint64_t total_input_tokens = 0, total_output_tokens = 0;

  uint64_t blocks = 0, unique_blocks = 0;
  double shared_block_fraction = 0;              // blocks seen in an earlier request / blocks
  double shared_token_fraction = 0;              // reusable leading-prefix tokens / input tokens
  double shared_block_fraction_after_first = 0;  // the same, blocks at positions >= 1 only
  uint64_t distinct_first_blocks = 0;
  Distribution reused_leading_blocks;  // per request: leading blocks seen before
  std::vector<std::pair<std::string, uint64_t>> reused_depth_histogram;  // "0", "1", "2-3", ...
  double requests_reusing_1_plus = 0, requests_reusing_2_plus = 0;       // fractions of requests
  std::vector<SharingDepth> depths;
};

struct TraceStatsOptions {
  uint32_t block_tokens = 512;
  uint64_t limit = 0;  // first N records; 0 = all
  double bin_s = 0;    // rate-over-time bin; 0 = about 20 bins of a round length
};

// The most rate-over-time bins a trace's duration may be cut into: a shorter bin_s is a
// std::invalid_argument naming --bin-s (a 1e-300 s bin would ask for 1e300 counters).
inline constexpr uint64_t kMaxRateBins = 100'000;

// A --bin-s value: a positive, finite number of seconds ("2", "0.5", "1e3"). Throws
// std::invalid_argument "--bin-s: ..." (one line; exit 2 in the CLI) for anything else: 0, a
// negative number, nan, inf, text.
[[nodiscard]] double ParseBinSeconds(const std::string& text);

// Throws std::invalid_argument (naming --bin-s) when options.bin_s cuts the trace into
// kMaxRateBins bins or more.
[[nodiscard]] TraceStats ComputeTraceStats(const MooncakeTrace& trace, const std::string& file,
                                           const TraceStatsOptions& options);
[[nodiscard]] nlohmann::ordered_json TraceStatsToJson(const TraceStats& stats);
void PrintTraceStats(std::ostream& out, const TraceStats& stats);

struct TraceStatsCommandOptions {
  std::string trace_path;
  TraceStatsOptions stats;
  std::string bin_s;  // --bin-s as given ("" = stats.bin_s); parsed by ParseBinSeconds
  bool json = false;
};

// Checks --bin-s, reads the trace (InputError for a bad one: exit 2 in the CLI) and prints its
// statistics.
int TraceStatsCommand(const TraceStatsCommandOptions& options, std::ostream& out);

}  // namespace feather
