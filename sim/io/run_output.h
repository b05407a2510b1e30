// run_output.h: writes a run's outputs, DIR/summary.json and DIR/results.h5, so that DIR appears
// complete or not at all, and reads results.h5 back (tests, tools).
//
// Use WriteRunOutputs at the end of a run (`feather run --out DIR`); SummaryToJson when the
// summary is wanted without files. Writing is O(requests + steps), mostly deflate: 20,000
// requests and 100,000 steps take about 170 ms (results/FORMAT.md, "Cost of writing").
//
// summary.json: 2-space indented, keys in the fixed order below, then a newline. Identical
// RunSummary + meta give byte-identical files (doubles are printed shortest-round-trip). A
// non-finite double (NaN, ±inf) is written as null, never as an invalid token or a made-up 0.
//   requests, requests_finished, requests_unservable, output_tokens, duration_s,
//   throughput_tok_s, mean_tbt_ms, p99_tbt_ms, mean_ttft_ms, p99_ttft_ms, mean_latency_ms,
//   mean_batch_size, scheduler_cpu_s, engine_busy_s, steps, preemptions, evictions,
//   cached_prompt_tokens, cascade_step_fraction, step_time_s_by_term {gemm, decode_attention,
//   kv_reuse, cascade_prefix, prefill_attention, overhead}, engine, selector, stop,
//   scenario {...}, provenance {...}
//
// results.h5 (format_version 1; results/FORMAT.md is the full description). Times are int64
// nanoseconds, lossless, each time dataset carrying the attribute units = "ns"; -1 is kept as is.
//   /  attributes: format_version (int64, 1), provenance (JSON text), scenario (JSON text),
//      engine, selector, stop_policy (strings)
//   /requests/  arrival_ns, first_token_ns, finish_ns (int64), prompt_tokens, output_tokens,
//               cached_tokens, preemptions, prefix_group (uint32): one row per RequestRecord
//   /steps/     start_ns, step_ns, scheduler_ns (int64), batch_size, decode_tokens,
//               prefill_tokens, admitted, waiting, common_prefix_tokens (uint32),
//               kv_used_blocks (uint64), cascade_used (uint8 0/1): one row per StepRecord
//   /steps/term/<StepTermName> (int64 ns): StepRecord::term_ns, one dataset per term
// All datasets are 1-D, little-endian, possibly of length 0; those over 4096 rows are chunked
// and compressed (shuffle + deflate 1).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>

#include "sim/serving/run_records.h"

namespace feather {

inline constexpr int kResultsFormatVersion = 1;

struct RunOutputMeta {
  nlohmann::json scenario;    // the resolved scenario, echoed into summary.json as "scenario"
  nlohmann::json provenance;  // feather version, git rev, build, host (the CLI fills it)
  std::string engine;         // "model" | "cpu" | "cuda"
  std::string selector, stop_policy;
};

// The summary as JSON, keys in the order listed above. ordered_json (not json, whose keys sort
// alphabetically) keeps that order; it converts to nlohmann::json where order does not matter.
[[nodiscard]] nlohmann::ordered_json SummaryToJson(const RunSummary& summary,
                                                   const RunOutputMeta& meta);
// The exact bytes WriteRunOutputs puts in summary.json.
[[nodiscard]] std::string SummaryJsonText(const RunSummary& summary, const RunOutputMeta& meta);
// RunUnserved (run_records.h) of the run a summary.json describes; false for a summary without
// those keys (an older format).
[[nodiscard]] bool SummaryRunUnserved(const nlohmann::ordered_json& summary);

// Writes DIR/summary.json and DIR/results.h5 so that DIR appears complete or not at all:
// everything goes to a sibling temp directory (DIR.partial-<pid>) which is renamed onto DIR at
// the end. An existing DIR that holds an earlier run (see PrepareOutputDir below) is replaced
// (renamed aside to DIR.old-<pid>, the new one renamed in, the old one deleted); an empty DIR
// is replaced by the rename itself; any other existing DIR is an error, never deleted. Creates missing parent directories. On any failure the
// temp directory is removed and a std::runtime_error names the path and the reason.
//
// `checkpoint`, when set, is called after each file is written and before the temp directory is
// installed (the last moment the write can be abandoned): an exception it throws (the CLI's
// Interrupted on SIGINT/SIGTERM) removes the temp directory and propagates unchanged, leaving
// DIR as it was.
void WriteRunOutputs(const std::string& dir, const RunRecords& records, const RunSummary& summary,
                     const RunOutputMeta& meta, const std::function<void()>& checkpoint = {});

// The temp directory WriteRunOutputs(dir, ...) writes into in this process: DIR.partial-<pid>.
[[nodiscard]] std::string PartialOutputDir(const std::string& dir);

// What replaces an existing DIR: only an earlier run's outputs (a summary.json feather wrote,
// its provenance naming a feather_version) or an empty directory. Anything else (a file, a
// symlink, a folder of the user's) is refused with a message naming it, never deleted.
//
// PrepareOutputDir(DIR) runs before a run spends its time: it throws std::runtime_error (naming
// DIR and the reason) when DIR could not be written (an existing DIR that may not be replaced,
// an ancestor that is a file, a folder where no directory can be made), creates nothing, and
// removes stale temps (RemoveStaleOutputTemps). WriteRunOutputs checks the replacement rule
// again when it installs.
void PrepareOutputDir(const std::string& dir);

// Removes, in the folder `parent`, the NAME.partial-<pid> and NAME.old-<pid> of every NAME in
// `names` that a `feather run` killed before it could clean up (SIGKILL, a crash) left: only
// where process <pid> no longer exists (not merely unsignalable) and the folder holds nothing but
// summary.json / results.h5. `feather run` passes its one output folder, `feather sweep` its
// points. Returns how many were removed. O(entries of `parent` + temps found × names).
size_t RemoveStaleOutputTemps(const std::string& parent, std::span<const std::string> names);

// DIR/summary.json of an earlier run, parsed; nullopt when it is absent, unreadable, not JSON,
// over 64 MiB or nested deeper than 16 levels (then it is no summary of feather's, and a bracket
// bomb never reaches a recursive dump()). The one reader of summaries that callers replace or
// resume by (run's output folder, sweep's points).
[[nodiscard]] std::optional<nlohmann::ordered_json> ReadSummaryJson(const std::string& dir);

// Writes only results.h5 at `path`, replacing a file there. Not atomic: a failure throws and may
// leave a partial file (WriteRunOutputs writes it inside its temp directory).
void WriteResultsH5(const std::string& path, const RunRecords& records, const RunOutputMeta& meta);

// For tests and tools: read results.h5 back. Throws std::runtime_error (naming the file and the
// dataset) for a missing dataset, a wrong type, columns of unequal length, or a format_version
// other than kResultsFormatVersion.
[[nodiscard]] RunRecords ReadResultsH5(const std::string& path);
// The root attributes of results.h5 (scenario and provenance parsed back from their JSON text).
[[nodiscard]] RunOutputMeta ReadResultsH5Meta(const std::string& path);

}  // namespace feather
