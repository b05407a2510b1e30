// sweep_spec.h: a sweep file (YAML) expanded into its points, each a list of `--set` overrides
// of one base scenario, validated up front.
//
// Use LoadSweepFile for `feather sweep SWEEP.yaml`: it reads the file, expands the points and
// loads every point's scenario through the same override machinery as `feather run --set`
// (sim/io/scenario.h), so a bad value is reported exactly as it would be there, but at the sweep
// file's line: FILE:LINE: KEY: MESSAGE, every problem of every point in one InputError. Nothing
// runs before the whole sweep is valid. Schema (scenarios/sweeps/README.md):
//
//   name: request-rate                       # optional; default: the file's stem
//   base: ../experiments/request-rate.yaml   # required; relative to the sweep file
//   set: {workload.requests: 5000}           # optional; fixed overrides of every point
//   points:                                  # optional; a list of override maps
//     - {scheduler.selector: fcfs, scheduler.stop: always}
//     - {scheduler.selector: cht, scheduler.stop: bandit}
//   vary:                                    # optional; key -> list of values (cartesian)
//     workload.arrival.rate: [5, 10, 20, 50, 100]
//     scheduler.selector, scheduler.stop: [[fcfs, always], [cht, bandit]]   # zipped keys
//   plot: {x: workload.arrival.rate, kind: lines, title: "..."}   # optional; for `feather plot`
//
// Points are points × the cartesian product of vary (the first entry outermost, the last
// fastest); an entry naming several comma-separated keys varies them together, one tuple of
// values per choice. Either part may be absent (no point lists and no vary = one point, the base as
// it is). Keys are
// `--set` keys; values are YAML (numbers, strings, maps, lists). A relative path given to a path
// key (model, profile, workload.trace.path, scheduler.policy.load) resolves against the sweep
// file's folder, like a path inside a scenario.
//
// A point is named from its values, "selector=cht,stop=bandit,rate=100" (each key's last
// component unless two keys share it, then the whole key), filesystem-safe ([A-Za-z0-9._=,+-]),
// at most kMaxPointNameChars; longer or colliding names end with "~" and 8 hex digits of a hash
// of their overrides. Expansion is O(points × keys); validation loads one scenario per point.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace feather {

inline constexpr size_t kMaxPointNameChars = 96;

struct SweepValue {
  std::string key;      // the --set key ("workload.arrival.rate")
  std::string text;     // the value as --set text (flow YAML: "100", "{kind: fixed, value: 5}")
  std::string display;  // the value as the name and the table show it
  uint32_t line = 0;    // where the value is in the sweep file (for messages)
  std::string section;  // the part of the sweep file it is in: "set", "vary", "points[2]"
};

struct SweepPoint {
  std::string name;                // unique, filesystem-safe
  std::vector<SweepValue> values;  // the swept values (points' and vary's), in name order
  // Every --set of the point: the sweep's `set` first, then `values`, as "key=value".
  std::vector<std::string> overrides;
  // The point's scenario as summary.json echoes it (ScenarioToJson), filled by validation: a
  // finished point whose summary.json echoes another scenario is stale and runs again.
  nlohmann::json scenario;
};

struct SweepSpec {
  std::string file;               // the sweep file as given
  std::string name;               // `name`, or the file's stem
  std::string base;               // the base scenario, resolved against the sweep file's folder
  std::vector<SweepValue> fixed;  // `set`
  // `feather sweep --set key=value`: applied to every point after everything in the file (so
  // they win), as "key=value"; they do not name points.
  std::vector<std::string> command_line_sets;
  std::vector<std::string> swept_keys;  // every key a point sets, in first-appearance order
  std::vector<SweepPoint> points;       // in expansion order
  nlohmann::ordered_json plot;          // the `plot` map as JSON ({} when absent)
};

// Reads, expands and validates `path`; throws InputError listing every problem. `sets` are the
// command line's --set overrides (SweepSpec::command_line_sets); their problems are reported
// against "--set", as `feather run` does.
[[nodiscard]] SweepSpec LoadSweepFile(const std::string& path,
                                      std::span<const std::string> sets = {});

// Same from text (tests); `display_name` names the file in messages and `base_dir` resolves
// relative paths. `validate_scenarios` = false skips loading the points' scenarios.
[[nodiscard]] SweepSpec LoadSweepText(std::string_view text, const std::string& display_name,
                                      const std::string& base_dir, bool validate_scenarios = true,
                                      std::span<const std::string> sets = {});

// The filesystem-safe form of a name fragment: characters outside [A-Za-z0-9._=,+-] become '_',
// runs of '_' collapse, a leading '.' or '-' gets a '_' in front.
[[nodiscard]] std::string SanitizeName(std::string_view text);

// "K/N" (1 <= K <= N) -> {K, N}; throws std::invalid_argument naming the text otherwise.
[[nodiscard]] std::pair<uint32_t, uint32_t> ParseShard(std::string_view text);
// The points of shard K of N: every N-th point starting at index K-1.
[[nodiscard]] std::vector<size_t> ShardPoints(size_t point_count, uint32_t k, uint32_t n);

}  // namespace feather
