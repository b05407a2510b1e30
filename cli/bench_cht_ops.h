// bench_cht_ops.h: `feather bench cht-ops`, the paper's Table "Time taken by individual
// functions of CHT" measured on this machine.
//
// Workload: `requests` prompts of `prefix_tokens` shared (in `groups` groups) + unique suffix
// tokens, inserted into a Chunked Hash Tree and drained by batch formation as the scheduler
// drives it (FindBest queried repeatedly, AddToBatch, Finish when a request's decode ends).
// Every operation is timed individually with a steady clock.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

namespace feather {

struct ChtOpsOptions {
  uint32_t requests = 5000;
  uint32_t prompt_tokens = 5000;
  uint32_t prefix_tokens = 4000;
  uint32_t groups = 5;
  uint32_t chunk_tokens = 50;
  uint32_t max_batch = 500;
  uint64_t seed = 1;
};

// Returns {"workload": {...}, "operations": {"insert": {"calls", "mean_ns", "total_ns"}, ...},
// "cht_peak_bytes", "peak_rss_bytes", "provenance": {...}}.
[[nodiscard]] nlohmann::json RunChtOpsBenchmark(const ChtOpsOptions& options);

}  // namespace feather
