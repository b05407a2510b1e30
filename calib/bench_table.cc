// bench_table.cc: WriteBenchTables / ReadBenchTables over sim/io/hdf5_table.h (the only HDF5 code
// of feather), with nlohmann-json for the list-valued attributes.
#include "calib/bench_table.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <ctime>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "sim/io/hdf5_table.h"

namespace feather::hw {
namespace {

constexpr std::string_view kFormat = "feather-bench-tables";
constexpr int64_t kFormatVersion = 1;
// Group attributes the file layout itself uses; a table may not use them for its own.
const std::set<std::string, std::less<>> kReservedAttributes = {"columns", "column_kinds",
                                                                "attribute_names"};
// int64 columns hold doubles that are exact integers: |x| < 2^63.
constexpr double kInt64Limit = 9223372036854775808.0;

std::string NowUtcIso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  const size_t length = std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return {text, length};
}

bool IsValidName(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos;
}

[[noreturn]] void Invalid(const BenchTable& table, const std::string& what) {
  throw std::invalid_argument("bench table '" + table.name + "': " + what);
}

// Checks one column's values against its kind.
void ValidateValues(const BenchTable& table, size_t c) {
  const std::string& name = table.column_names[c];
  const BenchColumnKind kind = table.KindOf(c);
  if (kind == BenchColumnKind::kFloat64) return;
  const auto labels = table.column_labels.find(name);
  if (kind == BenchColumnKind::kLabel && labels == table.column_labels.end()) {
    Invalid(table, "label column '" + name + "' has no column_labels entry");
  }
  for (size_t row = 0; row < table.columns[c].size(); ++row) {
    const double x = table.columns[c][row];
    const bool integral = std::isfinite(x) && std::trunc(x) == x && std::abs(x) < kInt64Limit;
    const bool in_labels = kind != BenchColumnKind::kLabel ||
                           (x >= 0 && x < static_cast<double>(labels->second.size()));
    if (!integral || !in_labels) {
      Invalid(table, "column '" + name + "' row " + std::to_string(row) + ": value " +
                         std::to_string(x) + " is not " +
                         (kind == BenchColumnKind::kLabel ? "a label code" : "an int64"));
    }
  }
}

void ValidateTable(const BenchTable& table) {
  if (!IsValidName(table.name)) Invalid(table, "invalid table name (empty, '/', '.' or '..')");
  if (table.columns.size() != table.column_names.size()) {
    Invalid(table, std::to_string(table.column_names.size()) + " column names for " +
                       std::to_string(table.columns.size()) + " columns");
  }
  if (!table.column_kinds.empty() && table.column_kinds.size() != table.column_names.size()) {
    Invalid(table, "column_kinds must be empty or one per column");
  }
  std::set<std::string_view> seen;
  for (size_t c = 0; c < table.columns.size(); ++c) {
    const std::string& name = table.column_names[c];
    if (!IsValidName(name)) Invalid(table, "invalid column name '" + name + "'");
    if (!seen.insert(name).second) Invalid(table, "duplicate column '" + name + "'");
    if (table.columns[c].size() != table.Rows()) {
      Invalid(table, "column '" + name + "' has " + std::to_string(table.columns[c].size()) +
                         " rows, the first column " + std::to_string(table.Rows()));
    }
    ValidateValues(table, c);
  }
  for (const auto& [name, value] : table.attributes) {
    if (name.empty() || kReservedAttributes.count(name) > 0) {
      Invalid(table, "attribute name '" + name + "' is empty or reserved");
    }
  }
}

// The table's attributes with the writer's provenance (host, command_line, date_utc) filled in
// where the table has none of its own.
std::map<std::string, std::string> AttributesWithProvenance(const BenchTable& table,
                                                            const std::string& host_json,
                                                            const std::string& command_line,
                                                            const std::string& date) {
  std::map<std::string, std::string> attributes = table.attributes;
  attributes.try_emplace("host", host_json);
  attributes.try_emplace("command_line", command_line);
  attributes.try_emplace("date_utc", date);
  return attributes;
}

void WriteColumnData(H5TableWriter& writer, const std::string& dataset, BenchColumnKind kind,
                     const std::vector<double>& values) {
  if (kind == BenchColumnKind::kFloat64) {
    writer.WriteColumn(dataset, H5ColumnType::kFloat64,
                       reinterpret_cast<const std::byte*>(values.data()), sizeof(double),
                       values.size());
    return;
  }
  std::vector<int64_t> integers(values.begin(), values.end());  // validated: exact integers
  writer.WriteColumn(dataset, H5ColumnType::kInt64,
                     reinterpret_cast<const std::byte*>(integers.data()), sizeof(int64_t),
                     integers.size());
}

void WriteTable(H5TableWriter& writer, const BenchTable& table,
                const std::map<std::string, std::string>& attributes) {
  const std::string group = "/" + table.name;
  writer.CreateGroup(group);
  nlohmann::json kinds = nlohmann::json::array();
  for (size_t c = 0; c < table.columns.size(); ++c) {
    const std::string dataset = group + "/" + table.column_names[c];
    const BenchColumnKind kind = table.KindOf(c);
    WriteColumnData(writer, dataset, kind, table.columns[c]);
    if (kind == BenchColumnKind::kLabel) {
      writer.SetStringAttribute(
          dataset, "labels", nlohmann::json(table.column_labels.at(table.column_names[c])).dump());
    }
    kinds.push_back(BenchColumnKindName(kind));
  }
  nlohmann::json names = nlohmann::json::array();
  for (const auto& [name, value] : attributes) {
    writer.SetStringAttribute(group, name, value);
    names.push_back(name);
  }
  writer.SetStringAttribute(group, "columns", nlohmann::json(table.column_names).dump());
  writer.SetStringAttribute(group, "column_kinds", kinds.dump());
  writer.SetStringAttribute(group, "attribute_names", names.dump());
}

void WriteFile(const std::string& path, const std::vector<BenchTable>& tables,
               const std::string& host_json, const std::string& command_line) {
  const std::string date = NowUtcIso8601();
  H5TableWriter writer(path);
  writer.SetStringAttribute("/", "format", kFormat);
  writer.SetIntAttribute("/", "format_version", kFormatVersion);
  writer.SetStringAttribute("/", "host", host_json);
  writer.SetStringAttribute("/", "command_line", command_line);
  writer.SetStringAttribute("/", "date_utc", date);
  nlohmann::json names = nlohmann::json::array();
  for (const BenchTable& table : tables) {
    WriteTable(writer, table, AttributesWithProvenance(table, host_json, command_line, date));
    names.push_back(table.name);
  }
  writer.SetStringAttribute("/", "tables", names.dump());
  writer.Close();
}

// A JSON list of strings from an attribute; throws naming the file and object otherwise.
std::vector<std::string> StringListAttribute(const H5TableReader& reader, const std::string& path,
                                             const std::string& object, const std::string& name) {
  const std::string text = reader.StringAttribute(object, name);
  const nlohmann::json parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_array() ||
      !std::all_of(parsed.begin(), parsed.end(), [](const auto& x) { return x.is_string(); })) {
    throw std::runtime_error("bench table file '" + path + "', object '" + object +
                             "': attribute '" + name + "' is not a JSON list of strings");
  }
  return parsed.get<std::vector<std::string>>();
}

BenchColumnKind ParseKind(std::string_view text, const std::string& path,
                          const std::string& dataset) {
  for (const BenchColumnKind kind :
       {BenchColumnKind::kFloat64, BenchColumnKind::kInt64, BenchColumnKind::kLabel}) {
    if (BenchColumnKindName(kind) == text) return kind;
  }
  throw std::runtime_error("bench table file '" + path + "', dataset '" + dataset +
                           "': unknown column kind '" + std::string(text) + "'");
}

std::vector<double> ReadColumnData(H5TableReader& reader, const std::string& dataset,
                                   BenchColumnKind kind) {
  const size_t rows = reader.ColumnRows(dataset);
  std::vector<double> values(rows);
  if (kind == BenchColumnKind::kFloat64) {
    reader.ReadColumn(dataset, H5ColumnType::kFloat64, reinterpret_cast<std::byte*>(values.data()),
                      sizeof(double), rows);
    return values;
  }
  std::vector<int64_t> integers(rows);
  reader.ReadColumn(dataset, H5ColumnType::kInt64, reinterpret_cast<std::byte*>(integers.data()),
                    sizeof(int64_t), rows);
  std::copy(integers.begin(), integers.end(), values.begin());
  return values;
}

BenchTable ReadTable(H5TableReader& reader, const std::string& path, const std::string& name) {
  BenchTable table;
  table.name = name;
  const std::string group = "/" + name;
  const auto columns = StringListAttribute(reader, path, group, "columns");
  const auto kinds = StringListAttribute(reader, path, group, "column_kinds");
  if (kinds.size() != columns.size()) {
    throw std::runtime_error("bench table file '" + path + "', group '" + group +
                             "': column_kinds and columns differ in length");
  }
  for (size_t c = 0; c < columns.size(); ++c) {
    const std::string dataset = group + "/" + columns[c];
    const BenchColumnKind kind = ParseKind(kinds[c], path, dataset);
    std::vector<std::string> labels;
    if (kind == BenchColumnKind::kLabel) {
      labels = StringListAttribute(reader, path, dataset, "labels");
    }
    table.AddColumn(columns[c], ReadColumnData(reader, dataset, kind), kind, std::move(labels));
  }
  for (const std::string& attribute : StringListAttribute(reader, path, group, "attribute_names")) {
    table.attributes[attribute] = reader.StringAttribute(group, attribute);
  }
  return table;
}

// Shell-style quoting of one argument, only when it needs it.
std::string QuoteArgument(const std::string& argument) {
  constexpr std::string_view kSafe =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=/.,:@%";
  if (!argument.empty() && argument.find_first_not_of(kSafe) == std::string::npos) {
    return argument;
  }
  std::string quoted = "'";
  for (const char ch : argument) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return quoted + "'";
}

}  // namespace

std::string_view BenchColumnKindName(BenchColumnKind kind) {
  switch (kind) {
    case BenchColumnKind::kFloat64:
      return "float64";
    case BenchColumnKind::kInt64:
      return "int64";
    case BenchColumnKind::kLabel:
      return "label";
  }
  return "unknown";
}

const std::vector<double>& BenchTable::Column(std::string_view column) const {
  for (size_t c = 0; c < column_names.size(); ++c) {
    if (column_names[c] == column) return columns.at(c);
  }
  throw std::out_of_range("bench table '" + name + "' has no column '" + std::string(column) + "'");
}

BenchColumnKind BenchTable::KindOf(size_t column) const {
  return column_kinds.empty() ? BenchColumnKind::kFloat64 : column_kinds.at(column);
}

void BenchTable::AddColumn(std::string column, std::vector<double> values, BenchColumnKind kind,
                           std::vector<std::string> labels) {
  // column_kinds stays empty (all float64) until the first column of another kind.
  if (!column_kinds.empty() || kind != BenchColumnKind::kFloat64) {
    column_kinds.resize(column_names.size(), BenchColumnKind::kFloat64);
    column_kinds.push_back(kind);
  }
  if (kind == BenchColumnKind::kLabel) column_labels[column] = std::move(labels);
  column_names.push_back(std::move(column));
  columns.push_back(std::move(values));
}

std::string CurrentCommandLine() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string line;
  size_t start = 0;
  while (start < raw.size()) {
    size_t end = raw.find('\0', start);
    if (end == std::string::npos) end = raw.size();
    if (!line.empty()) line += ' ';
    line += QuoteArgument(raw.substr(start, end - start));
    start = end + 1;
  }
  return line;
}

void WriteBenchTables(const std::filesystem::path& path, const std::vector<BenchTable>& tables,
                      const HostInfo& host, const std::string& command_line) {
  std::set<std::string_view> names;
  for (const BenchTable& table : tables) {
    ValidateTable(table);
    if (!names.insert(table.name).second) Invalid(table, "duplicate table name");
  }
  const std::string temporary = path.string() + ".tmp." + std::to_string(getpid());
  try {
    WriteFile(temporary, tables, ToJson(host).dump(), command_line);
    std::filesystem::rename(temporary, path);
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw;
  }
}

std::vector<BenchTable> ReadBenchTables(const std::filesystem::path& path) {
  const std::string file = path.string();
  H5TableReader reader(file);
  const bool ours = [&] {
    try {
      return reader.StringAttribute("/", "format") == kFormat;
    } catch (const std::runtime_error&) {
      return false;  // no such attribute: some other HDF5 file
    }
  }();
  if (!ours) throw std::runtime_error("'" + file + "' is not a feather bench table file");
  const int64_t version = reader.IntAttribute("/", "format_version");
  if (version > kFormatVersion) {
    throw std::runtime_error("bench table file '" + file + "' has format version " +
                             std::to_string(version) + ", this build reads up to " +
                             std::to_string(kFormatVersion));
  }
  std::vector<BenchTable> tables;
  for (const std::string& name : StringListAttribute(reader, file, "/", "tables")) {
    tables.push_back(ReadTable(reader, file, name));
  }
  return tables;
}

}  // namespace feather::hw
