// engine_cost.h: what a real engine's scheduler would spend on the CPU per scheduling round,
// for `scheduler_time: engine`.
//
// feather's C++ selectors are 50-100x faster than the Python schedulers of the engines they
// model, so charging their own measured time (`scheduler_time: measured`) under-states what a
// baseline costs in its real engine. An EngineCostTable holds per-operation cost lines fitted to
// the real code's CPU time on one machine (scripts/engine-cost.sh measures vLLM's
// Scheduler.schedule() and SGLang's SchedulePolicy.calc_priority with its RadixCache; the table
// ships as results/engine-cost/<machine>.yaml, read by sim/io/engine_cost_yaml.h). Each
// operation is a linear cost in the round's inputs:
//
//   ns = constant + per_running * running + per_admitted * admitted
//        + per_admitted_block * admitted_blocks + per_waiting * waiting
//        + per_waiting_token * waiting_tokens + per_tree_node * tree_nodes
//
// (an operation's table sets only the terms its fit supports; the others are 0). Which
// operation prices a baseline: SGLang's LPM and DFS-weight selectors -> sglang_lpm /
// sglang_dfs_weight, charged on rounds that rank a non-empty waiting queue (SGLang calls
// calc_priority only then); every other selector (FCFS, vLLM's block table, the oracle and
// Feather's CHT, which runs as a plugin inside vLLM's scheduler) -> vllm_schedule, charged on
// every round. Pure arithmetic on integers the simulator counts: deterministic. O(1) per round.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace feather {

// The inputs of one scheduling round.
struct EngineRound {
  uint64_t running = 0;          // requests continued from the running batch (before admission)
  uint64_t admitted = 0;         // requests admitted from the waiting queue this round
  uint64_t admitted_blocks = 0;  // prompt blocks of the admitted requests (prefix lookups)
  uint64_t waiting = 0;          // waiting requests when the round began
  uint64_t waiting_tokens = 0;   // their prompt tokens, summed (what a radix match reads)
  uint64_t tree_nodes = 0;       // radix-tree nodes when the round began (DFS-weight walks all)
  bool ranked = false;           // the selector ranked the waiting queue this round
};

// One operation's cost line; every coefficient in nanoseconds per unit.
struct EngineCostTerms {
  double constant_ns = 0;
  double per_running_ns = 0;
  double per_admitted_ns = 0;
  double per_admitted_block_ns = 0;
  double per_waiting_ns = 0;
  double per_waiting_token_ns = 0;
  double per_tree_node_ns = 0;
};

enum class EngineOperation : uint8_t { kVllmSchedule, kSglangLpm, kSglangDfsWeight };

[[nodiscard]] std::string_view EngineOperationName(EngineOperation op);
// The operation that prices a selector (scheduler.selector's name).
[[nodiscard]] EngineOperation EngineOperationFor(std::string_view selector);

// The operation a run charges (ServingConfig::engine_cost, resolved by sim/io/scenario_run.cc).
struct EngineCost {
  EngineOperation operation = EngineOperation::kVllmSchedule;
  EngineCostTerms terms;
};

struct EngineCostTable {
  std::string machine;  // measured_on: host and CPU model
  EngineCostTerms vllm_schedule;
  EngineCostTerms sglang_lpm;
  EngineCostTerms sglang_dfs_weight;

  [[nodiscard]] EngineCost For(EngineOperation op) const;
};

// Nanoseconds charged for `round` (rounded to the nearest ns; 0 for an SGLang operation on a
// round that ranked nothing).
[[nodiscard]] int64_t EngineRoundNs(const EngineCost& cost, const EngineRound& round);

}  // namespace feather
