// engine_cost_yaml.cc: the validating YAML reader for engine scheduling cost tables.
//
// Every field is read before the reader throws, so one InputError lists every problem of the
// file (missing operations or fields, a term that is not a non-negative number, an unknown term
// or key, a `source` other than measured | assumed | published), each with its 1-based line.
#include "sim/io/engine_cost_yaml.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "base/input_error.h"
#include "sim/io/yaml_map_reader.h"

namespace feather {
namespace {

// The term table: one row per cost-line coefficient (engine_cost.h).
struct TermField {
  const char* name;
  double EngineCostTerms::*field;
};
constexpr TermField kTerms[] = {
    {"constant_ns", &EngineCostTerms::constant_ns},
    {"per_running_ns", &EngineCostTerms::per_running_ns},
    {"per_admitted_ns", &EngineCostTerms::per_admitted_ns},
    {"per_admitted_block_ns", &EngineCostTerms::per_admitted_block_ns},
    {"per_waiting_ns", &EngineCostTerms::per_waiting_ns},
    {"per_waiting_token_ns", &EngineCostTerms::per_waiting_token_ns},
    {"per_tree_node_ns", &EngineCostTerms::per_tree_node_ns},
};
// A coefficient above a second per unit is a unit slip (seconds or microseconds for ns).
constexpr double kMaxTermNs = 1e9;

// `TERM: {value: X, source: measured|assumed|published, machine: "...", note: "..."}`.
void ReadTerm(MapReader& terms, const TermField& term, EngineCostTerms& out) {
  const YAML::Node node = terms.Value(term.name);
  if (!node.IsDefined()) return;  // absent: the fit does not use this input (0)
  if (!node.IsMap()) {
    terms.Add(node, term.name,
              "expected a map {value, source, machine, note}, got " + Describe(node));
    return;
  }
  MapReader entry(terms.problems(), node, terms.Join(term.name));
  entry.Real("value", out.*term.field, 0, kMaxTermNs, /*min_exclusive=*/false, /*required=*/true);
  std::string source;
  entry.Choice("source", source,
               std::initializer_list<std::string_view>{"measured", "assumed", "published"});
  if (!entry.Value("source").IsDefined()) {
    entry.Add(node, "source", "missing (required): where the value comes from");
  }
  std::string text;
  entry.String("machine", text);
  entry.String("note", text);
  entry.Finish();
}

}  // namespace

EngineCostTable ParseEngineCostTable(std::string_view yaml_text, const std::string& display_name) {
  const YAML::Node doc = ParseYaml(yaml_text, display_name);
  if (doc.IsNull()) {
    throw InputError(display_name, 1, "operations",
                     "missing (required): the file is empty; an engine cost table is a YAML map "
                     "with measured_on, engines and operations");
  }
  if (!doc.IsMap()) {
    throw InputError(display_name, std::max<uint32_t>(LineOf(doc), 1), "",
                     "an engine cost table is a YAML map of keys, got " + Describe(doc));
  }
  YamlProblems problems(display_name);
  EngineCostTable table;
  MapReader root(problems, doc, "");
  if (const std::optional<YAML::Node> on = root.Child("measured_on", true)) {
    MapReader m(problems, *on, "measured_on");
    std::string host, cpu, python, date;
    m.String("host", host, true);
    m.String("cpu_model", cpu, true);
    m.String("python", python);
    m.String("date_utc", date);
    table.machine = host + " (" + cpu + ")";
  }
  (void)root.Value("engines", true);  // versions, for the reader; not used by the simulator
  if (const std::optional<YAML::Node> ops = root.Child("operations", true)) {
    MapReader operations(problems, *ops, "operations");
    for (const auto& [name, terms_out] :
         {std::pair<const char*, EngineCostTerms*>{"vllm_schedule", &table.vllm_schedule},
          {"sglang_lpm", &table.sglang_lpm},
          {"sglang_dfs_weight", &table.sglang_dfs_weight}}) {
      const std::optional<YAML::Node> op = operations.Child(name, true);
      if (!op) continue;
      MapReader reader(problems, *op, operations.Join(name));
      std::string call;
      reader.String("call", call);
      (void)reader.Value("fit");  // the fit's error report, for the reader
      if (const std::optional<YAML::Node> terms = reader.Child("terms", true)) {
        MapReader term_reader(problems, *terms, reader.Join("terms"));
        for (const TermField& term : kTerms) ReadTerm(term_reader, term, *terms_out);
        term_reader.Finish();
      }
      reader.Finish();
    }
    operations.Finish();
  }
  root.Finish();
  if (!problems.empty()) throw InputError(problems.Take());
  return table;
}

}  // namespace feather
