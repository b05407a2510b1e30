// bench_sched_overhead.h: `feather bench sched-overhead`, the CPU time of one scheduling round
// per selector (the paper's Figure "CPU scheduler overhead" and Table "Overhead of dynamic
// prefix detection").
//
// For every selector, shared-prefix length and waiting-queue size: fill the waiting queue with
// prompts sharing a prefix, then time one round (BeginRound, then Next/Admit until the batch
// holds `max_batch` requests or the queue is empty). Repetitions interleave the selectors, and
// every selector's time is reported with its ratio to CHT's in the same repetition.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace feather {

struct SchedOverheadOptions {
  std::vector<std::string> selectors = {"fcfs", "lpm", "dfs-weight", "block-table", "oracle",
                                        "cht"};
  std::vector<uint32_t> prefix_tokens = {1000, 2000, 5000, 10000, 20000};
  std::vector<uint32_t> waiting = {100, 1000, 5000};
  uint32_t suffix_tokens = 100;
  uint32_t groups = 5;
  uint32_t max_batch = 500;
  uint32_t repetitions = 3;
  uint64_t seed = 1;
};

// Returns {"rows": [{"selector", "prefix_tokens", "waiting", "round_ns", "min_round_ns",
// "max_round_ns", "over_cht", "over_cht_min", "over_cht_max", ...}],
// "ratios_at_waiting_<largest>": {"<prefix>": {"<selector>_over_cht": median,
// "<selector>_over_cht_spread": [min, max]}}, "setup", "provenance"}. Ratios are taken per
// repetition against CHT's round of the same repetition (selectors interleave).
[[nodiscard]] nlohmann::json RunSchedOverheadBenchmark(const SchedOverheadOptions& options);

}  // namespace feather
