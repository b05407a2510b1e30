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
}

}  // namespace feather::python
