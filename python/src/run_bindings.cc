// run_bindings.cc: scenario runs from Python — feather.run's core (the `feather run` driver,
// cli/run_command.h) and the stop policy a scenario configures (sim/io/scenario_run.h).
//
// With simulation_bindings.cc, the only files of python/ that include sim/ or cli/ headers, so a
// reorganization of those folders touches these lines alone. Bad scenarios throw feather::InputError, raised in Python as
// feather.InputError (a ValueError) with the loader's "FILE:LINE: KEY: message" lines.
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "cli/run_command.h"
#include "policies/stop_policy.h"
#include "python/src/bindings.h"
#include "sim/io/embedded_files.h"
#include "base/input_error.h"
#include "sim/io/scenario.h"
#include "sim/io/scenario_run.h"
#include "sim/serving/sglang_prefill_adder.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace feather::python {

void BindRun(nb::module_& m) {
  nb::exception<InputError>(m, "InputError", PyExc_ValueError);
  m.attr("InputError").attr("__doc__") =
      "A bad scenario, profile, model description or trace: one 'FILE:LINE: KEY: message' line "
      "per problem found in the file.";

  m.def(
      "_run_json",
      [](const std::string& scenario_path, const std::vector<std::string>& overrides,
         const std::string& out_dir) {
        RunCommandOptions options;
        options.scenario_path = scenario_path;
        options.overrides = overrides;
        options.out_dir = out_dir;
        options.json = true;
        std::ostringstream out;
        int code = 0;
        {
          nb::gil_scoped_release release;  // a run takes seconds; SIGINT stops it (exit 130)
          code = RunScenarioCommand(options, out);
        }
        return std::make_pair(code, out.str());
      },
      "scenario_path"_a, "overrides"_a, "out_dir"_a,
      "`feather run SCENARIO --set ... --out DIR --json`: (exit code, summary.json text). An "
      "empty path runs the built-in default scenario, an empty out_dir writes out/<name>. Use "
      "feather.run().");

  m.def(
      "_scenario_stop_policy",
      [](const std::string& scenario_path, const std::vector<std::string>& overrides) {
        constexpr std::string_view kDefault = "scenarios/default.yaml";
        const Scenario scenario =
            scenario_path.empty()
                ? LoadScenarioText(FindEmbeddedFile(kDefault).value_or(""),
                                   "<built-in>/" + std::string(kDefault), ".", overrides)
                : LoadScenarioFile(scenario_path, overrides);
        return MakeScenarioPolicy(scenario);
      },
      "scenario_path"_a, "overrides"_a,
      "The stop policy a scenario configures (scheduler.stop and its options, loaded from "
      "scheduler.policy.load when set). Use feather.stop_policy_from_scenario().");
  m.def(
      "sglang_prefill_admit",
      [](int64_t page_size, double new_token_ratio, int64_t available_tokens,
         int64_t rem_input_tokens, int64_t rem_chunk_tokens, int64_t max_running_requests,
         const std::vector<int64_t>& running_remaining,
         const std::vector<std::vector<int64_t>>& waiting) {
        if (page_size < 1) throw nb::value_error("page_size must be >= 1");
        SglangAdderState s;
        s.page_size = page_size;
        s.new_token_ratio = new_token_ratio;
        s.available_tokens = available_tokens;
        s.rem_input_tokens = rem_input_tokens;
        s.rem_chunk_tokens = rem_chunk_tokens;
        s.max_running_requests = max_running_requests;
        std::vector<SglangWaitingReq> w;
        for (const auto& r : waiting) {
          if (r.size() != 3) throw nb::value_error("waiting rows are (extend_input_len, max_new_tokens, output_len)");
          w.push_back({r[0], r[1], r[2]});
        }
        const SglangAdmission a = SglangPrefillAdmit(s, running_remaining, w);
        return std::make_pair(a.admitted, a.chunked_len);
      },
      "page_size"_a, "new_token_ratio"_a, "available_tokens"_a, "rem_input_tokens"_a,
      "rem_chunk_tokens"_a, "max_running_requests"_a, "running_remaining"_a, "waiting"_a,
      "SGLang 0.5.6's prefill admission (sim/serving/sglang_prefill_adder.h): (indices of the "
      "admitted waiting requests, extend length of a truncated last one or -1). waiting rows are "
      "(extend_input_len, max_new_tokens, output_len); rem_chunk_tokens < 0 = no chunking.");
}

}  // namespace feather::python
