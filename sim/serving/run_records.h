// run_records.h: what one simulated (or real) run records: one row per request, one per engine
// step, and the summary DESIGN.md's contract names. Plain structs; sim/io/run_output.h writes them
// to DIR/summary.json and DIR/results.h5.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "sim/engine/engine.h"

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
  // Rejected because they can never be served (sim/serving/simulator.h: SimResult::unservable says why).
  uint64_t requests_unservable = 0;
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

  // Not in summary.json: the text summary's extra lines.
  uint64_t admitted_prompt_tokens = 0;   // Σ prompt tokens of requests admitted at least once
  uint64_t prefill_tokens = 0;           // Σ StepRecord::prefill_tokens: prompt tokens computed
                                         // (recompute after preemption included, cache hits not)
  double arrival_span_s = 0;             // first to last arrival
  uint64_t waiting_at_last_arrival = 0;  // requests waiting for admission at the last arrival
  // Arrivals outpaced service: arrivals span time (not an offline batch), the run reached the
  // last arrival, at least a fifth of all requests were still waiting for admission then (a
  // stable queue stays bounded, an overloaded one grows with the arrivals: about (1 - 1/ρ) of
  // them at load ρ), and the run went on for at least a fifth of the arrival span after it. Both
  // fifths hold from a load of about 1.25× what the server sustains.
  bool overloaded = false;
};

struct RunRecords {
  std::vector<RequestRecord> requests;
  std::vector<StepRecord> steps;
};

// Whether a finished simulation fails the run (`feather run` exits 3 after writing its outputs,
// and a sweep reruns such a point): requests were given and none finished, or some can never be
// served and the scenario does not allow that (limits.allow_unservable).
[[nodiscard]] constexpr bool RunUnserved(uint64_t requests, uint64_t finished, uint64_t unservable,
                                         bool allow_unservable) {
  return (requests > 0 && finished == 0) || (unservable > 0 && !allow_unservable);
}

}  // namespace feather
