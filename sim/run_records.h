// run_records.h: what one simulated (or real) run records: one row per request, one per engine
// step, and the summary DESIGN.md's contract names. Plain structs; sim/run_output.h writes them
// to DIR/summary.json and DIR/results.h5.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "sim/engine.h"

namespace feather {

struct RequestRecord {
  int64_t arrival_ns = 0;
  int64_t first_token_ns = -1;  // -1: never produced a token (run ended first)
  int64_t finish_ns = -1;       // -1: did not finish
  uint32_t prompt_tokens = 0;
  uint32_t output_tokens = 0;   // tokens generated
  uint32_t cached_tokens = 0;   // prefix-cache hit at the (last) admission
  uint32_t preemptions = 0;
  uint32_t prefix_group = 0;
};

struct StepRecord {
  int64_t start_ns = 0;      // simulated time the step began (after scheduling)
  int64_t step_ns = 0;       // engine time
  int64_t scheduler_ns = 0;  // scheduler time charged before this step
  uint32_t batch_size = 0;   // requests in the step
  uint32_t decode_tokens = 0;
  uint32_t prefill_tokens = 0;
  uint32_t admitted = 0;     // requests admitted while forming this step's batch
  uint32_t waiting = 0;      // requests waiting after admission
  uint32_t common_prefix_tokens = 0;
  uint64_t kv_used_blocks = 0;
  bool cascade_used = false;
  std::array<int64_t, kNumStepTerms> term_ns{};
};

// DESIGN.md's summary.json fields (times in the unit their name says).
struct RunSummary {
  uint64_t requests = 0;
  uint64_t requests_finished = 0;
  uint64_t output_tokens = 0;
  double duration_s = 0;
  double throughput_tok_s = 0;  // output tokens / duration
  double mean_tbt_ms = 0;       // mean gap between consecutive output tokens of a request
  double p99_tbt_ms = 0;
  double mean_ttft_ms = 0;
  double p99_ttft_ms = 0;
  double mean_latency_ms = 0;   // arrival to finish
  double mean_batch_size = 0;   // over steps
  double scheduler_cpu_s = 0;   // scheduler time charged to the simulation
  double engine_busy_s = 0;     // Σ step time
  uint64_t steps = 0;
  uint64_t preemptions = 0;
  uint64_t evictions = 0;
  uint64_t cached_prompt_tokens = 0;
  double cascade_step_fraction = 0;
  std::array<double, kNumStepTerms> term_s{};  // Σ per term over steps
};

struct RunRecords {
  std::vector<RequestRecord> requests;
  std::vector<StepRecord> steps;
};

}  // namespace feather
