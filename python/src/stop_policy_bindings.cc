// stop_policy_bindings.cc: feather.StopPolicy and what it reads and returns (policies/
// stop_policy.h), feather.make_stop_policy (policies/stop_policy_factory.h), saving and loading
// (policies/stop_policy_io.h) and the step reward (policies/policy_state.h).
//
// The C++ raises std::invalid_argument for a bad name or option (ValueError here) and
// std::runtime_error for a bad or missing policy file (RuntimeError); nothing in a policy aborts.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "policies/policy_state.h"
#include "policies/selector.h"
#include "policies/stop_policy.h"
#include "policies/stop_policy_factory.h"
#include "policies/stop_policy_io.h"
#include "python/src/bindings.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace feather::python {

void BindStopPolicies(nb::module_& m) {
  nb::enum_<StopDecision>(m, "StopDecision", "A stop policy's answer to one proposal.")
      .value("add", StopDecision::kAdd, "admit the proposed request")
      .value("stop", StopDecision::kStop, "close the batch");

  nb::enum_<StateBins>(m, "StateBins",
                       "How the bandit and Q-learning discretize (b, delta, w) "
                       "(policies/policy_state.h).")
      .value("authors", StateBins::kAuthors, "the authors' public code (the default)")
      .value("exponential", StateBins::kExponential, "the paper's wording");

  nb::class_<PrefixSignal>(m, "PrefixSignal",
                           "The CHT selector's prefix signal for one proposal (depths in chunks).")
      .def(
          "__init__",
          [](PrefixSignal* self, uint32_t tip_before_chunks, uint32_t tip_after_chunks,
             uint32_t peers, uint32_t chunk_tokens) {
            new (self) PrefixSignal{tip_before_chunks, tip_after_chunks, peers, chunk_tokens};
          },
          nb::kw_only(), "tip_before_chunks"_a = 0, "tip_after_chunks"_a = 0, "peers"_a = 0,
          "chunk_tokens"_a = 0, "A signal; every field defaults to 0.")
      .def_rw("tip_before_chunks", &PrefixSignal::tip_before_chunks,
              "Shared prefix depth of the batch before admitting the candidate.")
      .def_rw("tip_after_chunks", &PrefixSignal::tip_after_chunks,
              "The same after admitting it.")
      .def_rw("peers", &PrefixSignal::peers,
              "Waiting requests sharing the candidate's prefix at the new depth (w).")
      .def_rw("chunk_tokens", &PrefixSignal::chunk_tokens, "Tokens per chunk.");

  nb::class_<StopContext>(m, "StopContext", "What a stop policy sees for one proposal.")
      .def(
          "__init__",
          [](StopContext* self, uint32_t batch_size, uint32_t admitted_this_round,
             std::optional<PrefixSignal> signal, uint32_t waiting, uint64_t kv_used_blocks,
             uint64_t kv_total_blocks, uint32_t candidate_blocks) {
            new (self) StopContext{batch_size,     admitted_this_round, signal,
                                   waiting,        kv_used_blocks,      kv_total_blocks,
                                   candidate_blocks};
          },
          nb::kw_only(), "batch_size"_a = 0, "admitted_this_round"_a = 0, "signal"_a = nb::none(),
          "waiting"_a = 0, "kv_used_blocks"_a = 0, "kv_total_blocks"_a = 0,
          "candidate_blocks"_a = 0, "A context; every field defaults to 0 (signal to None).")
      .def_rw("batch_size", &StopContext::batch_size,
              "b: requests already in the batch (running + admitted).")
      .def_rw("admitted_this_round", &StopContext::admitted_this_round,
              "Of which admitted since begin_round().")
      .def_rw("signal", &StopContext::signal,
              "The PrefixSignal (CHT selector only), or None.")
      .def_rw("waiting", &StopContext::waiting, "Requests waiting, the candidate included.")
      .def_rw("kv_used_blocks", &StopContext::kv_used_blocks, "KV blocks in use (Dynamic Batching).")
      .def_rw("kv_total_blocks", &StopContext::kv_total_blocks, "KV blocks in the pool.")
      .def_rw("candidate_blocks", &StopContext::candidate_blocks,
              "KV blocks the candidate's prompt would need (cache hits not subtracted).");

  nb::class_<StepFeedback>(m, "StepFeedback",
                           "What an executed engine step reports back to the policy.")
      .def(
          "__init__",
          [](StepFeedback* self, uint32_t batch_size, uint32_t decode_tokens, int64_t step_ns) {
            new (self) StepFeedback{batch_size, decode_tokens, step_ns};
          },
          nb::kw_only(), "batch_size"_a = 0, "decode_tokens"_a = 0, "step_ns"_a = 0,
          "Feedback; every field defaults to 0.")
      .def_rw("batch_size", &StepFeedback::batch_size, "Requests in the executed step.")
      .def_rw("decode_tokens", &StepFeedback::decode_tokens, "Tokens the step generated.")
      .def_rw("step_ns", &StepFeedback::step_ns,
              "Engine time of the step without its prefill work, in nanoseconds.");

  m.def("step_reward", &StepRewardTokensPerS, "feedback"_a,
        "The learning policies' reward for a step: decode_tokens per second of step_ns, or None "
        "when step_ns <= 0.");

  nb::class_<StopPolicyOptions>(
      m, "StopPolicyOptions",
      "Every stop policy's options in one struct (policies/stop_policy_factory.h); a policy "
      "reads only its own. feather.make_stop_policy(name, **options) fills one.")
      .def(nb::init<>(), "The defaults (the authors' constants).")
      .def_rw("seed", &StopPolicyOptions::seed, "Seed of Q-learning's exploration.")
      .def_rw("heuristic_max_loss_chunks", &StopPolicyOptions::heuristic_max_loss_chunks,
              "heuristic: largest tip loss always accepted.")
      .def_rw("heuristic_relaxed_loss_chunks", &StopPolicyOptions::heuristic_relaxed_loss_chunks,
              "heuristic: largest tip loss accepted with enough peers.")
      .def_rw("heuristic_relaxed_min_peers", &StopPolicyOptions::heuristic_relaxed_min_peers,
              "heuristic: peers needed for the relaxed loss.")
      .def_rw("heuristic_floor_cap", &StopPolicyOptions::heuristic_floor_cap,
              "heuristic: cap of the batch-size floor.")
      .def_rw("bandit_exploration", &StopPolicyOptions::bandit_exploration,
              "bandit: UCB exploration constant c.")
      .def_rw("q_learning_rate", &StopPolicyOptions::q_learning_rate, "qlearning: alpha.")
      .def_rw("q_discount", &StopPolicyOptions::q_discount, "qlearning: gamma.")
      .def_rw("q_epsilon_start", &StopPolicyOptions::q_epsilon_start,
              "qlearning: initial exploration rate.")
      .def_rw("q_epsilon_min", &StopPolicyOptions::q_epsilon_min,
              "qlearning: final exploration rate.")
      .def_rw("q_epsilon_decay_decisions", &StopPolicyOptions::q_epsilon_decay_decisions,
              "qlearning: decisions over which epsilon decays linearly.")
      .def_rw("dynamic_latency_target_ms", &StopPolicyOptions::dynamic_latency_target_ms,
              "dynamic-batching: step-time (TBT) target in ms.")
      .def_rw("dynamic_memory_fraction", &StopPolicyOptions::dynamic_memory_fraction,
              "dynamic-batching: KV-use ceiling, a fraction of the pool.")
      .def_rw("state_bins", &StopPolicyOptions::state_bins,
              "bandit and qlearning: the StateBins scheme.")
      .def_rw("dynamic_forgetting", &StopPolicyOptions::dynamic_forgetting,
              "dynamic-batching: the fit's per-step decay in (0, 1].");

  nb::class_<StopPolicy>(
      m, "StopPolicy",
      "A stop policy (policies/stop_policy.h). Per engine step: begin_round(); then for each "
      "proposed request decide(context) -> StopDecision.add / .stop; after the step "
      "on_step_executed(feedback) rewards every decision since begin_round(). Make one with "
      "feather.make_stop_policy.")
      .def("name", [](const StopPolicy& p) { return std::string(p.Name()); },
           "The policy's scenario name (always, heuristic, bandit, qlearning, dynamic-batching).")
      .def("begin_round", &StopPolicy::BeginRound, "Starts forming a batch.")
      .def("decide", &StopPolicy::Decide, "context"_a,
           "Add or stop for one proposal (cheap: learning happens in on_step_executed).")
      .def("on_step_executed", &StopPolicy::OnStepExecuted, "feedback"_a,
           "Reports the executed step: the reward (feather.step_reward) of every decision taken "
           "since begin_round(). A frozen policy (learning False) ignores it.")
      .def_prop_rw("learning", &StopPolicy::learning, &StopPolicy::set_learning,
                   "Whether the policy updates its tables; False freezes it.")
      .def(
          "save", [](const StopPolicy& p, const std::string& path) { SaveStopPolicy(p, path); },
          "path"_a,
          "Writes options and learned state to a JSON file (atomically; feather-stop-policy "
          "format, policies/stop_policy_io.h). RuntimeError on I/O failure.")
      .def(
          "load", [](StopPolicy& p, const std::string& path) { LoadStopPolicy(p, path); },
          "path"_a,
          "Replaces options and state with a saved file's; `learning` is left alone. "
          "RuntimeError for a missing or bad file or one saved by another kind of policy.")
      .def("to_json", &StopPolicyToJson, "The text save() writes.")
      .def(
          "from_json",
          [](StopPolicy& p, std::string_view text, const std::string& source) {
            StopPolicyFromJson(p, text, source);
          },
          "text"_a, "source"_a = "<string>",
          "load() from text; `source` names it in error messages.")
      .def("__repr__", [](const StopPolicy& p) {
        return "StopPolicy(" + std::string(p.Name()) +
               (p.learning() ? ", learning)" : ", frozen)");
      });

  m.def(
      "stop_policy_names",
      [] {
        std::vector<std::string> names;
        for (const std::string_view name : StopPolicyNames()) names.emplace_back(name);
        return names;
      },
      "The names make_stop_policy accepts.");
  m.def(
      "_make_stop_policy",
      [](std::string_view name, const StopPolicyOptions& options) {
        return MakeStopPolicy(name, options);
      },
      "name"_a, "options"_a,
      "MakeStopPolicy; ValueError for an unknown name or an option out of range.");
}

}  // namespace feather::python
