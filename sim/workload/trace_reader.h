// trace_reader.h: reads a Mooncake-format request trace (JSON Lines) into flat, validated records.
//
// One record per line: {"timestamp": ms (integer, never decreasing), "input_length": tokens,
// "output_length": tokens, "hash_ids": [block ids]} where block i covers prompt tokens
// [i*block_tokens, (i+1)*block_tokens) and ids are chained prefix hashes (equal id = equal
// prefix up to and including that block). See ../shared/traces/README.md. Extra fields are
// ignored (other tools add e.g. "session_id"); blank lines are skipped. Equal timestamps are
// fine (the real trace has up to 28 requests in one millisecond); a decreasing one, a field
// given twice in one record, bytes that are not UTF-8, a truncated record and arrays or objects
// nested deeper than kMaxInputNesting (64, sim/io/yaml_map_reader.h; a record is flat) are
// problems. A message quotes at most 40 characters of a bad value, and renders no more of it.
//
// Every bad line becomes an InputProblem naming the file, the 1-based line and the field (for a
// line that is not valid JSON, the last field read before the error); the reader checks the
// whole file (or its first `limit` records), then throws one InputError with up to
// `max_problems` of them. Only this reader's .cc includes nlohmann-json (the I/O edge).
//
// Complexity: O(file size); all block ids live in one flat array.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <span>
#include <string>
#include <vector>

namespace feather {

struct TraceRecord {
  int64_t timestamp_ms = 0;    // >= 0, non-decreasing over the trace
  uint32_t input_tokens = 0;   // >= 1
  uint32_t output_tokens = 0;  // >= 1
  uint64_t first_block = 0;  // this record's block ids are MooncakeTrace::block_ids[first_block..)
  uint32_t block_count = 0;  // == ceil(input_tokens / block_tokens)
};

struct MooncakeTrace {
  std::vector<TraceRecord> records;
  std::vector<uint64_t> block_ids;  // every record's hash_ids, back to back
  uint64_t total_input_tokens = 0;

  [[nodiscard]] size_t size() const { return records.size(); }
  [[nodiscard]] std::span<const uint64_t> Blocks(size_t i) const {
    return {block_ids.data() + records[i].first_block, records[i].block_count};
  }
};

// The largest timestamp a trace may hold: 9e12 ms (285 years) is 9e18 ns, just under INT64_MAX,
// the simulated clock's range.
inline constexpr int64_t kTraceMaxTimestampMs = 9'000'000'000'000;

struct TraceReadOptions {
  uint64_t limit = 0;           // read the first `limit` records only; 0 = the whole file
  uint32_t block_tokens = 512;  // tokens per hash block (Mooncake: 512)
  size_t max_problems = 20;     // problems listed in the error; the rest are counted
  // Memory guards (the scenario's `limits:`, sim/workload/workload.h); 0 = none. More records than
  // max_records stops the read at once; a longer input_length or a running total above
  // max_total_tokens is a problem of that line. Each message names the limit and how to raise it.
  uint64_t max_records = 0;
  uint64_t max_input_tokens = 0;
  uint64_t max_total_tokens = 0;
  // Timestamps above this are a problem of their line; 0 = kTraceMaxTimestampMs. Replay lowers
  // it by its time_scale so that every scaled arrival fits the simulated clock.
  int64_t max_timestamp_ms = 0;
};

// Reads `path`. Throws InputError for an unreadable, empty or malformed file (a read that fails
// part way, EIO say, is "cannot read the trace: <reason>", never an early end of file).
[[nodiscard]] MooncakeTrace ReadMooncakeTrace(const std::string& path,
                                              const TraceReadOptions& options);

// Same, from an open stream; `file_name` is what the problems name.
[[nodiscard]] MooncakeTrace ParseMooncakeTrace(std::istream& in, const std::string& file_name,
                                               const TraceReadOptions& options);

}  // namespace feather
