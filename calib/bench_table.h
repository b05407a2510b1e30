// bench_table.h: microbenchmark tables (probe and kernel timings) in an HDF5 file, with the
// machine and build that produced them — the input of the calibration fit (calib/).
//
// A BenchTable is a named set of equally long columns held as doubles, plus string attributes.
// Each column is stored as float64 (times, rates), int64 (shapes, counts: exact integers) or a
// label column (small integer codes with their names, e.g. backend 0 = "eigen"); the reader
// hands every kind back as doubles, with the kinds and labels, so a fit needs one code path.
//
// File layout (h5py-friendly): one group per table, /<name>/<column> 1-D datasets. Root
// attributes: `format` ("feather-bench-tables"), `format_version`, `host` (hw/host_info.h
// ToJson, a JSON string), `command_line`, `date_utc` (time of writing), `tables` (JSON list of
// the table names, in order). Group attributes: the table's own attributes, each a string, plus
// `columns`, `column_kinds` (JSON lists, column order) and `attribute_names`. Label columns carry
// a `labels` attribute (JSON list). Every table also carries `host`, `command_line` and
// `date_utc`: the writer's, unless the table already has them (a table read from an older file
// keeps the provenance of the run that measured it).
//
// Costs: write and read are O(total rows) plus ~50 µs of HDF5 work per column; the write goes to
// `<path>.tmp.<pid>` and is renamed over `path`, so a reader never sees a half-written file.
// Errors (invalid names, unequal columns, non-integral int64 values, I/O) throw
// std::invalid_argument or std::runtime_error naming the file, table and column.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "hw/host_info.h"

namespace feather::hw {

enum class BenchColumnKind : uint8_t { kFloat64, kInt64, kLabel };
[[nodiscard]] std::string_view BenchColumnKindName(BenchColumnKind kind);  // float64|int64|label

struct BenchTable {
  std::string name;  // the HDF5 group: non-empty, no '/', not "." or ".."
  std::vector<std::string> column_names;
  std::vector<std::vector<double>> columns;  // parallel to column_names; all the same length
  std::map<std::string, std::string> attributes;
  // Parallel to column_names; empty means every column is kFloat64.
  std::vector<BenchColumnKind> column_kinds;
  // For each kLabel column: the name of each code (values are 0 … size-1).
  std::map<std::string, std::vector<std::string>> column_labels;

  [[nodiscard]] size_t Rows() const { return columns.empty() ? 0 : columns.front().size(); }
  // The column named `name`; throws std::out_of_range naming the table and the column.
  [[nodiscard]] const std::vector<double>& Column(std::string_view column) const;
  [[nodiscard]] BenchColumnKind KindOf(size_t column) const;
  // Appends a column; `labels` only for kLabel.
  void AddColumn(std::string column, std::vector<double> values,
                 BenchColumnKind kind = BenchColumnKind::kFloat64,
                 std::vector<std::string> labels = {});
};

// This process's command line (/proc/self/cmdline, arguments joined by spaces; arguments with
// spaces or quotes are single-quoted). Empty where unknown.
[[nodiscard]] std::string CurrentCommandLine();

// Writes `tables` to `path` atomically (temporary file + rename), replacing any file there.
void WriteBenchTables(const std::filesystem::path& path, const std::vector<BenchTable>& tables,
                      const HostInfo& host, const std::string& command_line = CurrentCommandLine());

// Reads every table of a file WriteBenchTables wrote, in the written order.
[[nodiscard]] std::vector<BenchTable> ReadBenchTables(const std::filesystem::path& path);

}  // namespace feather::hw
