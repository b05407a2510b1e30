// engine_cost.cc: evaluating the engines' scheduling cost lines (engine_cost.h).
#include "sim/serving/engine_cost.h"

#include <cmath>

namespace feather {

std::string_view EngineOperationName(EngineOperation op) {
  switch (op) {
    case EngineOperation::kVllmSchedule:
      return "vllm_schedule";
    case EngineOperation::kSglangLpm:
      return "sglang_lpm";
    case EngineOperation::kSglangDfsWeight:
      return "sglang_dfs_weight";
  }
  return "?";
}

EngineOperation EngineOperationFor(std::string_view selector) {
  if (selector == "lpm") return EngineOperation::kSglangLpm;
  if (selector == "dfs-weight") return EngineOperation::kSglangDfsWeight;
  return EngineOperation::kVllmSchedule;
}

EngineCost EngineCostTable::For(EngineOperation op) const {
  switch (op) {
    case EngineOperation::kSglangLpm:
      return {op, sglang_lpm};
    case EngineOperation::kSglangDfsWeight:
      return {op, sglang_dfs_weight};
    case EngineOperation::kVllmSchedule:
      break;
  }
  return {EngineOperation::kVllmSchedule, vllm_schedule};
}

int64_t EngineRoundNs(const EngineCost& cost, const EngineRound& round) {
  if (cost.operation != EngineOperation::kVllmSchedule && (!round.ranked || round.waiting == 0)) {
    return 0;  // SGLang ranks the queue only when requests wait
  }
  const EngineCostTerms& t = cost.terms;
  const double ns = t.constant_ns + t.per_running_ns * static_cast<double>(round.running) +
                    t.per_admitted_ns * static_cast<double>(round.admitted) +
                    t.per_admitted_block_ns * static_cast<double>(round.admitted_blocks) +
                    t.per_waiting_ns * static_cast<double>(round.waiting) +
                    t.per_waiting_token_ns * static_cast<double>(round.waiting_tokens) +
                    t.per_tree_node_ns * static_cast<double>(round.tree_nodes);
  return static_cast<int64_t>(std::llround(ns));
}

}  // namespace feather
