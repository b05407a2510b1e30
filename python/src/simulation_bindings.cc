// simulation_bindings.cc: feather.Simulation, the serving loop one step at a time from Python.
//
// `feather.run` runs a scenario to the end; a conformance harness (python/feather/vllm/) needs
// the loop in lockstep with another scheduler: it asks for the step feather's scheduler forms
// (Simulator::Schedule), compares it with what vLLM's own Scheduler forms at the same moment,
// then lets feather's engine run the step (Simulator::Complete). The workload the scenario
// generates is exposed too (arrival times, prompt tokens, output lengths), so the other side
// replays exactly the same requests.
//
// One of the two files of python/ (with run_bindings.cc) that include sim/ headers.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "python/src/bindings.h"
#include "sim/engine/engine.h"
#include "sim/io/scenario.h"
#include "sim/io/scenario_run.h"
#include "sim/serving/simulator.h"
#include "sim/workload/workload.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace feather::python {
namespace {

template <typename T>
nb::ndarray<nb::numpy, const T, nb::ndim<1>> ToArray(std::vector<T> values) {
  auto* owned = new std::vector<T>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, const T, nb::ndim<1>>(owned->data(), {owned->size()}, owner);
}

class Simulation {
 public:
  Simulation(const std::string& scenario_path, const std::vector<std::string>& overrides)
      : run_(scenario_path, overrides) {}

  nb::dict Serving() const {
    const ServingConfig& s = run_.prepared().serving;
    nb::dict d;
    d["max_num_batched_tokens"] = s.max_num_batched_tokens;
    d["max_num_seqs"] = s.max_num_seqs;
    d["block_tokens"] = s.block_tokens;
    d["kv_cache_blocks"] = s.kv_cache_blocks;
    d["prefix_caching"] = s.prefix_caching;
    d["chunked_prefill"] = s.chunked_prefill;
    d["cascade_attention"] = s.cascade_attention;
    d["reserve_full_sequence"] = s.reserve_full_sequence;
    d["selector"] = run_.scenario().selector;
    d["cht_retain_cached"] = run_.scenario().selector_options.cht_retain_cached;
    d["stop"] = run_.scenario().stop;
    d["name"] = run_.scenario().name;
    return d;
  }

  nb::dict Requests() const {
    const size_t n = run_.workload().size();
    std::vector<uint64_t> offsets(n + 1, 0);
    std::vector<int32_t> tokens;
    for (size_t i = 0; i < n; ++i) {
      run_.workload().prompts.Prompt(i).ForEachPiece(
          [&](std::span<const Token> piece) { tokens.insert(tokens.end(), piece.begin(), piece.end()); });
      offsets[i + 1] = tokens.size();
    }
    nb::dict d;
    d["arrival_ns"] = ToArray(run_.workload().arrival_ns);
    d["output_tokens"] = ToArray(run_.workload().output_tokens);
    d["prompt_offsets"] = ToArray(std::move(offsets));
    d["prompt_tokens"] = ToArray(std::move(tokens));
    return d;
  }

  // The next step as feather's scheduler forms it, or None when the run is over.
  nb::object Schedule() {
    if (plan_) throw std::logic_error("schedule() called twice without complete()");
    plan_ = run_.simulator().Schedule();
    if (!plan_) return nb::none();
    const BatchPlan& batch = plan_->batch;
    nb::list requests;
    for (const StepRequest& r : batch.requests) {
      requests.append(nb::make_tuple(r.id, r.context_tokens, r.new_tokens, r.is_prefill,
                                     r.block_table.size()));
    }
    nb::list preempted;
    for (const RequestId id : plan_->preempted) preempted.append(id);
    nb::dict d;
    d["now_ns"] = run_.simulator().NowNs();
    d["scheduler_ns"] = plan_->scheduler_ns;
    d["admitted"] = plan_->admitted;
    d["requests"] = requests;
    d["preempted"] = preempted;
    d["common_prefix_tokens"] = batch.common_prefix_tokens;
    return d;
  }

  // Runs the scheduled step on the scenario's engine and completes it; returns its time (ns).
  int64_t Complete() {
    if (!plan_) throw std::logic_error("complete() without a step from schedule()");
    const StepTiming timing = run_.engine().Execute(plan_->batch);
    run_.simulator().Complete(*plan_, timing);
    plan_.reset();
    return timing.total_ns;
  }

  // What the last completed step reported to the stop policy (its StepFeedback).
  nb::dict LastFeedback() {
    const StepFeedback& f = run_.simulator().last_feedback();
    nb::dict d;
    d["step_ns"] = f.step_ns;
    d["whole_step_ns"] = f.whole_step_ns;
    d["decode_ns"] = f.decode_ns;
    d["decode_requests"] = f.decode_requests;
    d["prefill_tokens"] = f.prefill_tokens;
    d["decode_kv_tokens"] = f.decode_kv_tokens;
    d["decode_kv_unique_tokens"] = f.decode_kv_unique_tokens;
    d["common_prefix_tokens"] = f.common_prefix_tokens;
    d["cascade_used"] = f.cascade_used;
    return d;
  }

 private:
  SteppedRun run_;
  std::optional<SchedulePlan> plan_;
};

}  // namespace

void BindSimulation(nb::module_& m) {
  nb::class_<Simulation>(m, "Simulation",
                         "The serving loop of a scenario one step at a time: schedule() forms "
                         "the next step, complete() runs it on the scenario's engine.")
      .def(nb::init<const std::string&, const std::vector<std::string>&>(), "scenario_path"_a,
           "overrides"_a = std::vector<std::string>{},
           "Loads SCENARIO with --set style overrides and generates its workload (raises "
           "feather.InputError for a bad scenario).")
      .def_prop_ro("serving", &Simulation::Serving,
                   "The resolved serving limits (kv_cache_blocks sized) and the scheduler names.")
      .def("requests", &Simulation::Requests,
           "The workload: arrival_ns, output_tokens, prompt_offsets (n + 1) and prompt_tokens "
           "(all prompts back to back), as numpy arrays.")
      .def("schedule", &Simulation::Schedule,
           "The next step, or None when every request finished: a dict with now_ns, "
           "scheduler_ns, admitted, requests [(id, context_tokens, new_tokens, is_prefill, "
           "blocks)], preempted [ids] and common_prefix_tokens.")
      .def("last_feedback", &Simulation::LastFeedback,
           "What the last completed step reported to the stop policy (StepFeedback's fields).")
      .def("complete", &Simulation::Complete,
           "Runs the step schedule() returned on the engine and completes it; returns the step "
           "time in ns.");
}

}  // namespace feather::python
