// sweep_table.h: a sweep's table, one row per point, from the points' summary.json, written as
// DIR/table.csv and DIR/table.h5.
//
// Use BuildSweepTable after the points have run (or when merging shards), then WriteSweepTable.
// Rows come in the sweep's point order (the expansion order of the sweep file, the same on every
// machine and shard), so shards merged give the same bytes as one run. Nothing time- or
// host-dependent goes in: provenance lives in DIR/sweep.json.
//
// Columns: point (the point's name), each swept key (its value; numbers as numbers), scheduler
// (selector+stop, plus "+<reward_time>" when that is not "step"), selector, stop, model,
// profile, then every scalar field of summary.json in the file's order, nested objects flattened
// one level with '.' (step_time_s_by_term.gemm). A point that lacks a column has an empty cell.
//
// table.csv: RFC 4180 (a header line; cells with ',', '"' or a newline quoted), numbers as in
// summary.json (shortest round trip), '\n' line ends.
// table.h5 (sim/io/hdf5_table.h): root attributes format_version (1), kind ("feather sweep table")
// and columns (JSON array, in order); one 1-D dataset per column under /table/<column>, one
// element per row: int64 when every cell is an integer, float64 when every cell is a number or
// empty (empty = NaN), else uint32 codes into the dataset's attribute `labels` (JSON array of
// strings, in order of first appearance; an empty cell is "").
// Costs: O(points × columns); both files are written to a temp name and renamed into place.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace feather {

struct SweepTableRow {
  std::string point;
  std::vector<std::pair<std::string, std::string>> values;  // swept key -> value as displayed
  nlohmann::ordered_json summary;                           // the point's summary.json
};

struct SweepTable {
  std::vector<std::string> columns;
  std::vector<std::vector<nlohmann::json>> cells;  // [row][column]: string, number or null
};

[[nodiscard]] SweepTable BuildSweepTable(const std::vector<std::string>& swept_keys,
                                         const std::vector<SweepTableRow>& rows);

[[nodiscard]] std::string SweepTableCsv(const SweepTable& table);

// Writes DIR/table.csv and DIR/table.h5 (each via a temp file and a rename). Throws
// std::runtime_error naming the path on failure.
void WriteSweepTable(const std::string& dir, const SweepTable& table);

}  // namespace feather
