// sweep_table.cc: the sweep table, CSV and HDF5 (sweep_table.h).
#include "cli/sweep_table.h"

#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <system_error>

#include "sim/io/hdf5_table.h"
#include "sim/io/yaml_map_reader.h"

namespace feather {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr int kTableFormatVersion = 1;

// A swept value as a cell: a number when the text is one, else the text.
Json CellOf(const std::string& text) {
  if (const auto i = ParseInteger(text)) return *i;
  if (const auto r = ParseReal(text)) return *r;
  return text;
}

std::string ShortName(const Json& value) {
  if (!value.is_string()) return value.is_null() ? std::string() : value.dump();
  const std::string text = value.get<std::string>();
  const fs::path path(text);
  return path.has_extension() && path.extension() == ".yaml" ? path.stem().string() : text;
}

std::string Dump(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string CsvCell(const Json& value) {
  if (value.is_null()) return "";
  if (!value.is_string()) return Dump(value);
  const std::string text = value.get<std::string>();
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string quoted = "\"";
  for (const char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

// Writes `bytes` via a temp file in the same folder and a rename.
template <typename Write>
void WriteAtomically(const fs::path& target, Write&& write) {
  const fs::path temp =
      target.parent_path() / (target.filename().string() + ".tmp-" + std::to_string(getpid()));
  try {
    write(temp);
  } catch (...) {
    std::error_code ignored;
    fs::remove(temp, ignored);
    throw;
  }
  std::error_code error;
  fs::rename(temp, target, error);
  if (error) {
    fs::remove(temp, error);
    throw std::runtime_error("cannot rename '" + temp.string() + "' to '" + target.string() + "'");
  }
}

}  // namespace

SweepTable BuildSweepTable(const std::vector<std::string>& swept_keys,
                           const std::vector<SweepTableRow>& rows) {
  SweepTable table;
  std::map<std::string, size_t> index;
  auto column = [&](const std::string& name) {
    const auto [it, inserted] = index.emplace(name, table.columns.size());
    if (inserted) table.columns.push_back(name);
    return it->second;
  };
  // A swept key named like a derived column (`model`, say) is that column: its swept value wins.
  const std::set<std::string> swept(swept_keys.begin(), swept_keys.end());
  (void)column("point");
  for (const std::string& key : swept_keys) (void)column(key);
  for (const char* c : {"scheduler", "selector", "stop", "model", "profile"}) (void)column(c);

  std::vector<std::map<size_t, Json>> sparse(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    const SweepTableRow& row = rows[r];
    auto& cells = sparse[r];
    // Derived and summary cells never overwrite a swept value.
    auto set = [&](const std::string& name, Json value) {
      if (swept.count(name) == 0) cells[column(name)] = std::move(value);
    };
    cells[column("point")] = row.point;
    for (const auto& [key, text] : row.values) cells[column(key)] = CellOf(text);
    const auto& s = row.summary;
    const auto scenario =
        s.contains("scenario") && s["scenario"].is_object() ? Json(s["scenario"]) : Json::object();
    const std::string selector = s.value("selector", std::string());
    const std::string stop = s.value("stop", std::string());
    std::string scheduler = selector + "+" + stop;
    if (scenario.contains("scheduler") && scenario["scheduler"].is_object()) {
      const std::string reward = scenario["scheduler"].value("reward_time", std::string("step"));
      if (reward != "step" && !reward.empty()) scheduler += "+" + reward;
      // The learning policies' state bins, when not the authors' (the default).
      const std::string bins = scenario["scheduler"].value("state_bins", std::string("authors"));
      if ((stop == "bandit" || stop == "qlearning" || stop == "bandit-delayed") &&
          bins != "authors" && !bins.empty()) {
        scheduler += "+" + bins;
      }
    }
    set("scheduler", scheduler);
    set("selector", selector);
    set("stop", stop);
    set("model", ShortName(scenario.value("model", Json())));
    set("profile", ShortName(scenario.value("profile", Json())));
    for (const auto& [key, value] : s.items()) {
      if (key == "scenario" || key == "provenance" || key == "selector" || key == "stop") continue;
      if (value.is_object()) {
        for (const auto& [sub, v] : value.items()) {
          if (!v.is_structured()) set(key + "." + sub, Json(v));
        }
      } else if (!value.is_array()) {
        set(key, Json(value));
      }
    }
  }
  table.cells.assign(rows.size(), std::vector<Json>(table.columns.size()));
  for (size_t r = 0; r < rows.size(); ++r) {
    for (auto& [c, v] : sparse[r]) table.cells[r][c] = std::move(v);
  }
  return table;
}

std::string SweepTableCsv(const SweepTable& table) {
  std::string text;
  for (size_t c = 0; c < table.columns.size(); ++c) {
    if (c > 0) text += ',';
    text += CsvCell(table.columns[c]);
  }
  text += '\n';
  for (const auto& row : table.cells) {
    for (size_t c = 0; c < row.size(); ++c) {
      if (c > 0) text += ',';
      text += CsvCell(row[c]);
    }
    text += '\n';
  }
  return text;
}

void WriteSweepTable(const std::string& dir, const SweepTable& table) {
  const std::string csv = SweepTableCsv(table);
  WriteAtomically(fs::path(dir) / "table.csv", [&](const fs::path& temp) {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << csv;
    out.close();
    if (!out) throw std::runtime_error("cannot write '" + temp.string() + "'");
  });

  WriteAtomically(fs::path(dir) / "table.h5", [&](const fs::path& temp) {
    H5TableWriter writer(temp.string());
    writer.SetIntAttribute("/", "format_version", kTableFormatVersion);
    writer.SetStringAttribute("/", "kind", "feather sweep table");
    writer.SetStringAttribute("/", "columns", Dump(Json(table.columns)));
    writer.CreateGroup("/table");
    const size_t n = table.cells.size();
    for (size_t c = 0; c < table.columns.size(); ++c) {
      bool all_integer = true, all_number = true;
      for (const auto& row : table.cells) {
        const Json& v = row[c];
        all_integer = all_integer && v.is_number_integer();
        all_number = all_number && (v.is_number() || v.is_null());
      }
      const std::string dataset = "/table/" + table.columns[c];
      if (all_integer && n > 0) {
        std::vector<int64_t> values(n);
        for (size_t r = 0; r < n; ++r) {
          const Json& v = table.cells[r][c];
          values[r] = v.is_number_unsigned()
                          ? static_cast<int64_t>(std::min<uint64_t>(
                                v.get<uint64_t>(), std::numeric_limits<int64_t>::max()))
                          : v.get<int64_t>();
        }
        writer.WriteColumn(dataset, H5ColumnType::kInt64,
                           reinterpret_cast<const std::byte*>(values.data()), sizeof(int64_t), n);
      } else if (all_number) {
        std::vector<double> values(n);
        for (size_t r = 0; r < n; ++r) {
          const Json& v = table.cells[r][c];
          values[r] = v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>();
        }
        writer.WriteColumn(dataset, H5ColumnType::kFloat64,
                           reinterpret_cast<const std::byte*>(values.data()), sizeof(double), n);
      } else {
        std::vector<std::string> labels;
        std::map<std::string, uint32_t> code_of;
        std::vector<uint32_t> codes(n);
        for (size_t r = 0; r < n; ++r) {
          const Json& v = table.cells[r][c];
          const std::string text = v.is_string() ? v.get<std::string>() : CsvCell(v);
          const auto [it, inserted] = code_of.emplace(text, static_cast<uint32_t>(labels.size()));
          if (inserted) labels.push_back(text);
          codes[r] = it->second;
        }
        writer.WriteColumn(dataset, H5ColumnType::kUInt32,
                           reinterpret_cast<const std::byte*>(codes.data()), sizeof(uint32_t), n);
        writer.SetStringAttribute(dataset, "labels", Dump(Json(labels)));
      }
    }
    writer.Close();
  });
}

}  // namespace feather
