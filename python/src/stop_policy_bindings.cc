// stop_policy_bindings.cc: feather.StopPolicy and what it reads and returns (policies/
// stop_policy.h), feather.make_stop_policy (policies/stop_policy_factory.h), saving and loading
// (policies/stop_policy_io.h) and the step reward (policies/policy_state.h).
//
// The C++ raises std::invalid_argument for a bad name or option (ValueError here) and
// std::runtime_error for a bad or missing policy file (RuntimeError); nothing in a policy aborts.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "base/cascade_rule.h"
#include "policies/config_fields.h"
#include "policies/policy_state.h"
#include "policies/selector.h"
#include "policies/stop_policy.h"
#include "policies/stop_policy_factory.h"
#include "policies/stop_policy_io.h"
#include "python/src/bindings.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace feather::python {
namespace {

// Calls fn(config) with the named policy's config inside `options`; false for a policy without
// knobs ("always") or an unknown name.
template <class Fn>
bool WithConfig(StopPolicyOptions& options, std::string_view name, Fn&& fn) {
  if (name == "heuristic") {
    fn(options.heuristic);
  } else if (name == "bandit" || name == "bandit-delayed") {
    fn(options.bandit);
  } else if (name == "qlearning") {
    fn(options.qlearning);
  } else if (name == "dynamic-batching") {
    fn(options.dynamic_batching);
  } else if (name == "mpc") {
    fn(options.mpc);
  } else {
    return false;
  }
  return true;
}

// Sets the config's knobs from Python values, by its field table: a key the table lacks, or a
// value of the wrong type (a bool for a number, a float for an integer) is a TypeError; a value
// out of the knob's range a ValueError naming it and the range (before anything is narrowed).
template <class Config>
void SetKnobs(Config& config, const nb::dict& knobs, std::string_view policy) {
  for (const auto& [k, v] : knobs) {
    const std::string key = nb::cast<std::string>(nb::str(k));
    bool found = false;
    ForEachField(config, [&](const ConfigField<Config>& field, auto& value) {
      if (field.key != key) return;
      found = true;
      using T = std::remove_reference_t<decltype(value)>;
      const std::string what = "make_stop_policy: " + key + " = " +
                               nb::cast<std::string>(nb::repr(v)) + ": ";
      if constexpr (std::is_same_v<T, bool>) {
        if (!nb::isinstance<nb::bool_>(v)) throw nb::type_error((what + "expected a bool").c_str());
        value = nb::cast<bool>(v);
      } else {
        const bool is_int = nb::isinstance<nb::int_>(v) && !nb::isinstance<nb::bool_>(v);
        if constexpr (std::is_same_v<T, double>) {
          if (!is_int && !nb::isinstance<nb::float_>(v)) {
            throw nb::type_error((what + "expected a number").c_str());
          }
          const double d = nb::cast<double>(v);
          if (!InFieldRange(field, d)) throw nb::value_error((what + "must be " + RangeText(field)).c_str());
          value = d;
        } else {
          if (!is_int) throw nb::type_error((what + "expected an integer").c_str());
          int64_t i = 0;
          if (!nb::try_cast<int64_t>(v, i) || i < 0 || !InFieldRange(field, static_cast<uint64_t>(i))) {
            throw nb::value_error((what + "must be " + RangeText(field)).c_str());
          }
          value = static_cast<T>(i);
        }
      }
    });
    if (!found) {
      std::string known;
      ForEachField(config, [&](const ConfigField<Config>& field, const auto&) {
        known += (known.empty() ? "" : ", ") + std::string(field.key);
      });
      throw nb::type_error(("make_stop_policy: unknown option '" + key + "' for '" +
                            std::string(policy) + "' (known: " + known + ")")
                               .c_str());
    }
  }
}

}  // namespace


void BindStopPolicies(nb::module_& m) {
  nb::enum_<StopDecision>(m, "StopDecision", "A stop policy's answer to one proposal.")
      .value("add", StopDecision::kAdd, "admit the proposed request")
      .value("stop", StopDecision::kStop, "close the batch")
      .value("skip", StopDecision::kSkip,
             "pass over the proposal for this round (a selector that cannot skip: stop)");
  // A round takes at most this many skips; the next one is a stop (policies/stop_policy.h).
  m.attr("MAX_SKIPS_PER_ROUND") = kMaxSkipsPerRound;

  nb::enum_<StateBins>(m, "StateBins",
                       "How the bandit and Q-learning discretize (b, delta, w) "
                       "(policies/policy_state.h).")
      .value("authors", StateBins::kAuthors, "the authors' public code (the default)")
      .value("exponential", StateBins::kExponential, "the paper's wording")
      .value("cascade", StateBins::kCascade,
             "cascade status, largest group, KV occupancy, backlog (reads the batch shape)");

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
             uint64_t kv_total_blocks, uint32_t candidate_blocks, uint32_t max_batch_requests) {
            new (self) StopContext{batch_size,     admitted_this_round, signal,
                                   waiting,        kv_used_blocks,      kv_total_blocks,
                                   candidate_blocks, max_batch_requests};
          },
          nb::kw_only(), "batch_size"_a = 0, "admitted_this_round"_a = 0, "signal"_a = nb::none(),
          "waiting"_a = 0, "kv_used_blocks"_a = 0, "kv_total_blocks"_a = 0,
          "candidate_blocks"_a = 0, "max_batch_requests"_a = 0,
          "A context; every field defaults to 0 (signal to None).")
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
              "KV blocks the candidate's prompt would need (cache hits not subtracted).")
      .def_rw("max_batch_requests", &StopContext::max_batch_requests,
              "The serving limit on running requests (max_num_seqs); 0 = not told.")
      // The batch shape (filled by feather.BatchShapeTracker.fill for policies whose
      // wants_batch_shape() is True).
      .def_rw("batch_kv_tokens", &StopContext::batch_kv_tokens,
              "Sum of the batch's sequence tokens (KV a decode step reads).")
      .def_rw("batch_unique_kv_tokens", &StopContext::batch_unique_kv_tokens,
              "Distinct KV tokens held (blocks in use x block size).")
      .def_rw("batch_common_prefix_tokens", &StopContext::batch_common_prefix_tokens,
              "Leading tokens every batch request shares.")
      .def_rw("candidate_tokens", &StopContext::candidate_tokens,
              "The candidate's sequence length.")
      .def_rw("candidate_cached_tokens", &StopContext::candidate_cached_tokens,
              "The candidate's prefix-cache hit.")
      .def_rw("candidate_common_prefix_tokens", &StopContext::candidate_common_prefix_tokens,
              "What the batch would share with the candidate admitted.")
      .def_rw("kv_block_tokens", &StopContext::kv_block_tokens, "Tokens per KV block.")
      .def_prop_ro(
          "largest_groups",
          [](const StopContext& c) {
            return std::vector<StopContext::PrefixGroup>(c.largest_groups.begin(),
                                                         c.largest_groups.end());
          },
          "The batch's largest prefix group at each depth of prefix_group_depths (a copy).")
      .def_prop_ro_static(
          "prefix_group_depths",
          [](nb::handle) {
            return std::vector<uint32_t>(StopContext::kPrefixGroupDepths.begin(),
                                         StopContext::kPrefixGroupDepths.end());
          },
          "Depths (tokens) of largest_groups.");

  nb::class_<StopContext::PrefixGroup>(m, "PrefixGroup",
                                       "A batch's largest group sharing its first `depth` tokens.")
      .def_ro("requests", &StopContext::PrefixGroup::requests, "Requests in the group.")
      .def_ro("prefix_tokens", &StopContext::PrefixGroup::prefix_tokens,
              "Leading tokens all of them share.")
      .def_ro("candidate_in", &StopContext::PrefixGroup::candidate_in,
              "Whether the candidate belongs to it.")
      .def_ro("waiting", &StopContext::PrefixGroup::waiting,
              "Waiting requests with the group's key (0: none, or not told).")
      .def_ro("nested", &StopContext::PrefixGroup::nested,
              "Whether it lies within the first depth's largest group.");

  nb::class_<StepFeedback>(m, "StepFeedback",
                           "What an executed engine step reports back to the policy.")
      .def(
          "__init__",
          [](StepFeedback* self, uint32_t batch_size, uint32_t decode_tokens, int64_t step_ns,
             int64_t whole_step_ns, int64_t decode_ns, uint32_t decode_requests) {
            new (self) StepFeedback{batch_size,    decode_tokens, step_ns,
                                    whole_step_ns, decode_ns,     decode_requests};
          },
          nb::kw_only(), "batch_size"_a = 0, "decode_tokens"_a = 0, "step_ns"_a = 0,
          "whole_step_ns"_a = 0, "decode_ns"_a = -1, "decode_requests"_a = 0,
          "Feedback; every field defaults to 0, decode_ns to -1 (not priced).")
      .def_rw("batch_size", &StepFeedback::batch_size, "Requests in the executed step.")
      .def_rw("decode_tokens", &StepFeedback::decode_tokens, "Tokens the step generated.")
      .def_rw("step_ns", &StepFeedback::step_ns,
              "Engine time the reward is priced on, in nanoseconds: the whole step, or its decode "
              "requests alone under scheduler.reward_time: decode-only.")
      .def_rw("whole_step_ns", &StepFeedback::whole_step_ns,
              "Engine time of the whole step (bandit-authors' reward); 0 means step_ns.")
      .def_rw("decode_ns", &StepFeedback::decode_ns,
              "Engine time of the step's decode requests alone (bandit-delayed); -1 = not priced.")
      .def_rw("decode_requests", &StepFeedback::decode_requests,
              "Requests that decoded in the step (prefill chunks excluded; bandit-delayed).")
      // The step's shape, for policies that fit step time (mpc, converge).
      .def_rw("prefill_tokens", &StepFeedback::prefill_tokens, "Prefill tokens of the step.")
      .def_rw("decode_kv_tokens", &StepFeedback::decode_kv_tokens,
              "Sum of the decode requests' context + 1 (0 = the shape is not reported).")
      .def_rw("decode_kv_unique_tokens", &StepFeedback::decode_kv_unique_tokens,
              "Distinct KV tokens behind those reads.")
      .def_rw("common_prefix_tokens", &StepFeedback::common_prefix_tokens,
              "Leading tokens all the step's requests share.")
      .def_rw("cascade_used", &StepFeedback::cascade_used,
              "Whether the step ran cascade attention.");

  // vLLM's cascade thresholds (base/cascade_rule.h), for the plugin's step shape.
  m.attr("CASCADE_MIN_PREFIX_TOKENS") = kCascadeMinPrefixTokens;
  m.attr("CASCADE_MIN_REQUESTS") = kCascadeMinRequests;

  m.def("step_reward", &StepRewardTokensPerS, "feedback"_a,
        "The learning policies' reward for a step: decode_tokens per second of step_ns, or None "
        "when step_ns <= 0.");

  nb::class_<StopPolicy>(
      m, "StopPolicy",
      "A stop policy (policies/stop_policy.h). Per engine step: begin_round(); then for each "
      "proposed request decide(context) -> StopDecision.add / .stop; after the step "
      "on_step_executed(feedback) rewards every decision since begin_round(). Make one with "
      "feather.make_stop_policy.")
      .def("name", [](const StopPolicy& p) { return std::string(p.Name()); },
           "The policy's scenario name (one of stop_policy_names()).")
      .def("begin_round", &StopPolicy::BeginRound, "Starts forming a batch.")
      .def("decide", &StopPolicy::Decide, "context"_a,
           "Add or stop for one proposal (cheap: learning happens in on_step_executed).")
      .def("wants_batch_shape", &StopPolicy::WantsBatchShape,
           "Whether decide() reads the context's batch shape (mpc, converge): fill it with "
           "feather.BatchShapeTracker.")
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
      [](std::string_view name, uint64_t seed, StateBins state_bins, const nb::dict& knobs) {
        StopPolicyOptions options;
        options.seed = seed;
        options.state_bins = state_bins;
        const bool has_config = WithConfig(options, name, [&](auto& config) {
          SetKnobs(config, knobs, name);
        });
        if (!has_config && knobs.size() > 0) {
          // An unknown name is MakeStopPolicy's ValueError; "always" has no knobs at all.
          if (std::find(StopPolicyNames().begin(), StopPolicyNames().end(), name) !=
              StopPolicyNames().end()) {
            throw nb::type_error(("make_stop_policy: unknown option '" +
                                  nb::cast<std::string>(nb::str((*knobs.begin()).first)) + "' ('" +
                                  std::string(name) + "' has no options)")
                                     .c_str());
          }
        }
        return MakeStopPolicy(name, options);
      },
      "name"_a, "seed"_a, "state_bins"_a, "knobs"_a,
      "MakeStopPolicy with the named policy's knobs set from `knobs` (its field table's keys); "
      "TypeError for an unknown knob or a value of the wrong type, ValueError for an unknown "
      "name or a value out of range.");
  m.def(
      "stop_policy_knobs",
      [](std::string_view name) {
        nb::dict out;
        StopPolicyOptions options;
        WithConfig(options, name, [&](auto& config) {
          using Config = std::remove_reference_t<decltype(config)>;
          ForEachField(config, [&](const ConfigField<Config>& field, const auto& value) {
            nb::dict knob;
            knob["default"] = value;
            knob["range"] = RangeText(field);
            out[nb::str(field.key.data(), field.key.size())] = knob;
          });
        });
        return out;
      },
      "name"_a,
      "The knobs make_stop_policy(name, **knobs) takes, as {key: {'default': value, 'range': "
      "text}}, in the order of the policy's field table (policies/config_fields.h); the keys are "
      "those of the scenario's scheduler.<policy> section. Empty for 'always' and unknown names.");
}

}  // namespace feather::python
