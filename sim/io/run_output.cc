// run_output.cc: summary.json and results.h5 for one run, written atomically as a directory.
#include "sim/io/run_output.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "sim/io/hdf5_table.h"

namespace feather {
namespace {

namespace fs = std::filesystem;
using OrderedJson = nlohmann::ordered_json;

// A non-finite double has no JSON spelling; null says "undefined" where 0 would be a plausible
// but false measurement.
OrderedJson Finite(double value) {
  if (std::isfinite(value)) return value;
  return nullptr;
}

// JSON text that never throws on invalid UTF-8 in a string (a scenario path, a host name): the
// bad bytes become U+FFFD instead of aborting the write of a finished run.
template <typename Json>
std::string Dump(const Json& json, int indent) {
  return json.dump(indent, ' ', false, Json::error_handler_t::replace);
}

// ---- results.h5 columns -----------------------------------------------------------------------
// One list of columns per record type, shared by the writer and the reader so the two cannot
// drift apart. `visit(name, member, is_time)` is called once per column, in file order.

template <typename Visit>
void ForEachRequestColumn(Visit&& visit) {
  visit("arrival_ns", &RequestRecord::arrival_ns, true);
  visit("first_token_ns", &RequestRecord::first_token_ns, true);
  visit("finish_ns", &RequestRecord::finish_ns, true);
  visit("prompt_tokens", &RequestRecord::prompt_tokens, false);
  visit("output_tokens", &RequestRecord::output_tokens, false);
  visit("cached_tokens", &RequestRecord::cached_tokens, false);
  visit("preemptions", &RequestRecord::preemptions, false);
  visit("prefix_group", &RequestRecord::prefix_group, false);
}

template <typename Visit>
void ForEachStepColumn(Visit&& visit) {
  visit("start_ns", &StepRecord::start_ns, true);
  visit("step_ns", &StepRecord::step_ns, true);
  visit("scheduler_ns", &StepRecord::scheduler_ns, true);
  visit("batch_size", &StepRecord::batch_size, false);
  visit("decode_tokens", &StepRecord::decode_tokens, false);
  visit("prefill_tokens", &StepRecord::prefill_tokens, false);
  visit("admitted", &StepRecord::admitted, false);
  visit("waiting", &StepRecord::waiting, false);
  visit("common_prefix_tokens", &StepRecord::common_prefix_tokens, false);
  visit("kv_used_blocks", &StepRecord::kv_used_blocks, false);
  visit("cascade_used", &StepRecord::cascade_used, false);
}

template <typename T>
constexpr H5ColumnType ColumnTypeOf() {
  static_assert(std::is_same_v<T, int64_t> || std::is_same_v<T, uint64_t> ||
                    std::is_same_v<T, uint32_t> || std::is_same_v<T, uint8_t> ||
                    std::is_same_v<T, bool>,
                "no HDF5 column type for this field");
  if constexpr (std::is_same_v<T, int64_t>) {
    return H5ColumnType::kInt64;
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    return H5ColumnType::kUInt64;
  } else if constexpr (std::is_same_v<T, uint32_t>) {
    return H5ColumnType::kUInt32;
  } else if constexpr (std::is_same_v<T, bool>) {
    return H5ColumnType::kBool;
  } else {
    return H5ColumnType::kUInt8;
  }
}

std::string TermDataset(size_t term) {
  return "/steps/term/" + std::string(StepTermName(static_cast<StepTerm>(term)));
}

void WriteTable(H5TableWriter& writer, const RunRecords& records) {
  writer.CreateGroup("/requests");
  ForEachRequestColumn([&](const char* name, auto member, bool is_time) {
    using T = std::remove_cvref_t<decltype(RequestRecord{}.*member)>;
    const std::string dataset = std::string("/requests/") + name;
    const auto& rows = records.requests;
    writer.WriteColumn(
        dataset, ColumnTypeOf<T>(),
        rows.empty() ? nullptr : reinterpret_cast<const std::byte*>(&(rows.front().*member)),
        sizeof(RequestRecord), rows.size());
    if (is_time) writer.SetStringAttribute(dataset, "units", "ns");
  });

  writer.CreateGroup("/steps");
  const auto& steps = records.steps;
  ForEachStepColumn([&](const char* name, auto member, bool is_time) {
    using T = std::remove_cvref_t<decltype(StepRecord{}.*member)>;
    const std::string dataset = std::string("/steps/") + name;
    writer.WriteColumn(
        dataset, ColumnTypeOf<T>(),
        steps.empty() ? nullptr : reinterpret_cast<const std::byte*>(&(steps.front().*member)),
        sizeof(StepRecord), steps.size());
    if (is_time) writer.SetStringAttribute(dataset, "units", "ns");
  });
  writer.CreateGroup("/steps/term");
  for (size_t term = 0; term < kNumStepTerms; ++term) {
    const std::string dataset = TermDataset(term);
    writer.WriteColumn(
        dataset, H5ColumnType::kInt64,
        steps.empty() ? nullptr : reinterpret_cast<const std::byte*>(&steps.front().term_ns[term]),
        sizeof(StepRecord), steps.size());
    writer.SetStringAttribute(dataset, "units", "ns");
  }
}

[[noreturn]] void FailWrite(const std::string& dir, const std::string& reason) {
  throw std::runtime_error("cannot write run outputs to '" + dir + "': " + reason);
}

void WriteTextFile(const fs::path& path, std::string_view text) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    throw std::runtime_error("cannot create '" + path.string() + "': " + std::strerror(errno));
  }
  const size_t written = std::fwrite(text.data(), 1, text.size(), file);
  const int write_errno = errno;
  // fclose flushes: a full disk may only show here.
  if (std::fclose(file) != 0 || written != text.size()) {
    const int error = written != text.size() ? write_errno : errno;
    throw std::runtime_error("cannot write '" + path.string() + "': " + std::strerror(error));
  }
}

// Whether `dir` holds an earlier run's outputs: a summary.json that feather wrote (a JSON object
// whose provenance names a feather_version). Only such a directory is replaced.
bool HoldsFeatherRun(const fs::path& dir) {
  const std::optional<OrderedJson> json = ReadSummaryJson(dir.string());
  if (!json || !json->is_object()) return false;
  const auto provenance = json->find("provenance");
  return provenance != json->end() && provenance->is_object() &&
         provenance->contains("feather_version");
}

// Why `target`, which exists, may not be replaced by a run's outputs (nullopt when it may).
std::optional<std::string> ReplaceableOutputProblem(const fs::path& target) {
  std::error_code error;
  const fs::file_status status = fs::symlink_status(target, error);
  std::string why = "'";
  why += target.string();
  if (fs::is_symlink(status) || !fs::is_directory(status)) {
    return why + "' exists and is not a directory; not replacing it";
  }
  if (fs::is_empty(target, error) || HoldsFeatherRun(target)) return std::nullopt;
  return why +
         "' exists and does not hold a feather run (no summary.json written by feather); not "
         "replacing it: choose another --out or scenario name, or move that folder away yourself";
}

// Puts the finished temp directory at `target`, replacing an earlier run's directory (only a
// directory ReplaceableOutputProblem accepts: a run of feather's, or an empty one).
void Install(const fs::path& temp, const fs::path& target, const std::string& pid) {
  std::error_code error;
  const fs::file_status status = fs::symlink_status(target, error);
  if (error && error != std::errc::no_such_file_or_directory) {
    throw std::runtime_error("cannot inspect '" + target.string() + "': " + error.message());
  }
  // rename(2) puts a directory in place of a missing path or of an empty directory, atomically.
  if (!fs::exists(status) || (fs::is_directory(status) && fs::is_empty(target, error))) {
    fs::rename(temp, target, error);
    if (error) {
      throw std::runtime_error("cannot rename '" + temp.string() + "' to '" + target.string() +
                               "': " + error.message());
    }
    return;
  }
  // Anything but an earlier run of feather's is not ours to delete (checked again here: the
  // folder may have changed while the run simulated).
  if (const std::optional<std::string> why = ReplaceableOutputProblem(target)) {
    throw std::runtime_error(*why);
  }
  // rename(2) cannot replace a non-empty directory: move the old one aside first.
  const fs::path old = target.parent_path() / (target.filename().string() + ".old-" + pid);
  fs::remove_all(old, error);  // a leftover of a crashed run with the same pid
  fs::rename(target, old, error);
  if (error) {
    throw std::runtime_error("cannot move the earlier '" + target.string() +
                             "' aside: " + error.message());
  }
  fs::rename(temp, target, error);
  if (error) {
    std::error_code restore_error;
    fs::rename(old, target, restore_error);  // best effort: put the earlier run back
    throw std::runtime_error("cannot rename '" + temp.string() + "' to '" + target.string() +
                             "': " + error.message());
  }
  // The new run is in place; an old copy that cannot be deleted is left behind, not an error.
  fs::remove_all(old, error);
}

nlohmann::json ParseJsonAttribute(const std::string& path, const std::string& text,
                                  const char* name) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error("HDF5 file '" + path + "': attribute '" + name +
                             "' is not valid JSON: " + e.what());
  }
}

}  // namespace

OrderedJson SummaryToJson(const RunSummary& summary, const RunOutputMeta& meta) {
  OrderedJson json;
  json["requests"] = summary.requests;
  json["requests_finished"] = summary.requests_finished;
  json["requests_unservable"] = summary.requests_unservable;
  json["output_tokens"] = summary.output_tokens;
  json["duration_s"] = Finite(summary.duration_s);
  json["throughput_tok_s"] = Finite(summary.throughput_tok_s);
  json["mean_tbt_ms"] = Finite(summary.mean_tbt_ms);
  json["p99_tbt_ms"] = Finite(summary.p99_tbt_ms);
  json["mean_ttft_ms"] = Finite(summary.mean_ttft_ms);
  json["p99_ttft_ms"] = Finite(summary.p99_ttft_ms);
  json["mean_latency_ms"] = Finite(summary.mean_latency_ms);
  json["mean_batch_size"] = Finite(summary.mean_batch_size);
  json["scheduler_cpu_s"] = Finite(summary.scheduler_cpu_s);
  json["engine_busy_s"] = Finite(summary.engine_busy_s);
  json["steps"] = summary.steps;
  json["preemptions"] = summary.preemptions;
  json["evictions"] = summary.evictions;
  json["cached_prompt_tokens"] = summary.cached_prompt_tokens;
  json["cascade_step_fraction"] = Finite(summary.cascade_step_fraction);
  OrderedJson by_term = OrderedJson::object();
  for (size_t term = 0; term < kNumStepTerms; ++term) {
    by_term[std::string(StepTermName(static_cast<StepTerm>(term)))] = Finite(summary.term_s[term]);
  }
  json["step_time_s_by_term"] = std::move(by_term);
  json["engine"] = meta.engine;
  json["selector"] = meta.selector;
  json["stop"] = meta.stop_policy;
  json["scenario"] = OrderedJson(meta.scenario);
  json["provenance"] = OrderedJson(meta.provenance);
  return json;
}

std::string SummaryJsonText(const RunSummary& summary, const RunOutputMeta& meta) {
  return Dump(SummaryToJson(summary, meta), 2) + "\n";
}

bool SummaryRunUnserved(const OrderedJson& summary) {
  const auto count = [&](const char* key) -> uint64_t {
    const auto it = summary.find(key);
    return it != summary.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
  };
  if (!summary.contains("requests_unservable")) return false;
  bool allowed = false;
  if (const auto scenario = summary.find("scenario");
      scenario != summary.end() && scenario->is_object()) {
    if (const auto limits = scenario->find("limits");
        limits != scenario->end() && limits->is_object()) {
      allowed = limits->value("allow_unservable", false);
    }
  }
  return RunUnserved(count("requests"), count("requests_finished"), count("requests_unservable"),
                     allowed);
}

void WriteResultsH5(const std::string& path, const RunRecords& records, const RunOutputMeta& meta) {
  H5TableWriter writer(path);
  writer.SetIntAttribute("/", "format_version", kResultsFormatVersion);
  writer.SetStringAttribute("/", "provenance", Dump(meta.provenance, -1));
  writer.SetStringAttribute("/", "scenario", Dump(meta.scenario, -1));
  writer.SetStringAttribute("/", "engine", meta.engine);
  writer.SetStringAttribute("/", "selector", meta.selector);
  writer.SetStringAttribute("/", "stop_policy", meta.stop_policy);
  WriteTable(writer, records);
  writer.Close();
}

namespace {

// DIR without trailing separators ("out/run/" names the directory "out/run"), its parent ("."
// when none) and its last component.
struct OutputPaths {
  fs::path target;
  fs::path parent;
  std::string name;
};

OutputPaths SplitOutputDir(const std::string& dir) {
  std::string trimmed = dir;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  OutputPaths paths;
  paths.target = fs::path(trimmed);
  paths.name = paths.target.filename().string();
  paths.parent = paths.target.parent_path();
  if (paths.parent.empty()) paths.parent = ".";
  return paths;
}

// SplitOutputDir for a folder outputs will be written to: throws when its last component cannot
// name one.
OutputPaths UsableOutputPaths(const std::string& dir) {
  OutputPaths paths = SplitOutputDir(dir);
  const std::string& name = paths.name;
  if (name.empty() || name == "." || name == ".." || name == "/") {
    FailWrite(dir, "not a usable directory name");
  }
  return paths;
}

}  // namespace

std::string PartialOutputDir(const std::string& dir) {
  const OutputPaths paths = SplitOutputDir(dir);
  return (paths.parent / (paths.name + ".partial-" + std::to_string(::getpid()))).string();
}

std::optional<OrderedJson> ReadSummaryJson(const std::string& dir) {
  constexpr std::uintmax_t kMaxSummaryBytes = std::uintmax_t{64} << 20;
  constexpr int kMaxNesting = 16;  // a summary nests a few levels deep
  const fs::path summary = fs::path(dir) / "summary.json";
  std::error_code error;
  if (!fs::is_regular_file(fs::symlink_status(summary, error))) return std::nullopt;
  const std::uintmax_t size = fs::file_size(summary, error);
  if (error || size > kMaxSummaryBytes) return std::nullopt;
  std::ifstream in(summary, std::ios::binary);
  std::string text(static_cast<size_t>(size), '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(size))) return std::nullopt;
  // Anything deeper is not a summary of feather's, and is not built at all (a bracket bomb would
  // overflow the stack in a later recursive dump()).
  struct TooDeep {};
  const OrderedJson::parser_callback_t bounded = [](int depth, OrderedJson::parse_event_t,
                                                    OrderedJson&) {
    if (depth > kMaxNesting) throw TooDeep{};
    return true;
  };
  try {
    OrderedJson json = OrderedJson::parse(text, bounded, /*allow_exceptions=*/false);
    if (json.is_discarded()) return std::nullopt;
    return json;
  } catch (const TooDeep&) {
    return std::nullopt;
  }
}

namespace {

// "<name>.partial-<pid>" or "<name>.old-<pid>" (a temp or set-aside directory of WriteRunOutputs
// for `name`) with `name` one of `names`: the pid, else 0.
long TempOwnerPid(const std::string& file, std::span<const std::string> names) {
  for (const char* marker : {".partial-", ".old-"}) {
    const size_t at = file.rfind(marker);
    if (at == std::string::npos) continue;
    if (std::find(names.begin(), names.end(), std::string_view(file).substr(0, at)) ==
        names.end()) {
      continue;
    }
    const std::string digits = file.substr(at + std::strlen(marker));
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos ||
        digits.size() > 9) {
      return 0;
    }
    return std::strtol(digits.c_str(), nullptr, 10);
  }
  return 0;
}

// Whether `dir` holds nothing but what WriteRunOutputs puts there (so removing it loses nothing
// that feather did not write).
bool HoldsOnlyRunFiles(const fs::path& dir) {
  std::error_code error;
  if (!fs::is_directory(fs::symlink_status(dir, error))) return false;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string file = it->path().filename().string();
    if ((file != "summary.json" && file != "results.h5") ||
        !fs::is_regular_file(it->symlink_status(error))) {
      return false;
    }
  }
  return !error;
}

}  // namespace

size_t RemoveStaleOutputTemps(const std::string& parent, std::span<const std::string> names) {
  std::error_code error;
  if (names.empty() || !fs::is_directory(parent, error)) return 0;
  size_t removed = 0;
  for (fs::directory_iterator it(parent, error), end; !error && it != end; it.increment(error)) {
    const long pid = TempOwnerPid(it->path().filename().string(), names);
    if (pid <= 0 || pid == static_cast<long>(::getpid())) continue;
    // Alive (or not ours to signal, EPERM): its owner may still be writing.
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    if (!HoldsOnlyRunFiles(it->path())) continue;
    std::error_code remove_error;
    if (fs::remove_all(it->path(), remove_error) > 0 && !remove_error) ++removed;
  }
  return removed;
}

void PrepareOutputDir(const std::string& dir) {
  const OutputPaths paths = UsableOutputPaths(dir);
  const std::string& name = paths.name;
  std::error_code error;
  const fs::file_status status = fs::symlink_status(paths.target, error);
  // ENOTDIR: an ancestor is a file, named below.
  if (error && error != std::errc::no_such_file_or_directory &&
      error != std::errc::not_a_directory) {
    FailWrite(dir, "cannot inspect it: " + error.message());
  }
  if (fs::exists(status)) {
    if (const std::optional<std::string> why = ReplaceableOutputProblem(paths.target)) {
      throw std::runtime_error(*why);
    }
  }
  // Can a directory be made where the outputs will go? Try it at the nearest existing ancestor
  // (the parent, or the first missing component of the path to it), then take it away again.
  fs::path existing = paths.parent;
  fs::path first_missing;
  while (!fs::exists(fs::symlink_status(existing, error))) {
    first_missing = existing;
    const fs::path up = existing.parent_path();
    existing = up.empty() ? fs::path(".") : up;
    if (existing == first_missing) break;
  }
  if (!fs::is_directory(existing, error)) {
    FailWrite(dir, "'" + existing.string() + "' is not a directory");
  }
  const fs::path probe = first_missing.empty() ? fs::path(PartialOutputDir(dir)) : first_missing;
  if (::mkdir(probe.c_str(), 0755) != 0) {
    if (errno != EEXIST) {
      FailWrite(dir, "cannot create a directory in '" + existing.string() +
                         "': " + std::strerror(errno));
    }
  } else {
    ::rmdir(probe.c_str());
  }
  RemoveStaleOutputTemps(paths.parent.string(), std::span<const std::string>(&name, 1));
}

void WriteRunOutputs(const std::string& dir, const RunRecords& records, const RunSummary& summary,
                     const RunOutputMeta& meta, const std::function<void()>& checkpoint) {
  const OutputPaths paths = UsableOutputPaths(dir);
  std::error_code error;
  fs::create_directories(paths.parent, error);
  if (error) {
    FailWrite(dir, "cannot create the parent '" + paths.parent.string() + "': " + error.message());
  }

  const std::string pid = std::to_string(::getpid());
  const fs::path temp = PartialOutputDir(dir);
  fs::remove_all(temp, error);  // a leftover of a crashed run with the same pid
  fs::create_directory(temp, error);
  if (error) FailWrite(dir, "cannot create '" + temp.string() + "': " + error.message());

  // A failed write becomes "cannot write run outputs ..."; the checkpoint's exception goes
  // through as it is. Either way the temp directory goes.
  const auto remove_temp = [&] {
    std::error_code ignored;
    fs::remove_all(temp, ignored);
  };
  const auto stage = [&](auto&& write) {
    try {
      write();
    } catch (const std::exception& e) {
      remove_temp();
      FailWrite(dir, e.what());
    }
  };
  const auto check = [&] {
    if (!checkpoint) return;
    try {
      checkpoint();
    } catch (...) {
      remove_temp();
      throw;
    }
  };
  stage([&] { WriteTextFile(temp / "summary.json", SummaryJsonText(summary, meta)); });
  check();
  stage([&] { WriteResultsH5((temp / "results.h5").string(), records, meta); });
  check();
  stage([&] { Install(temp, paths.target, pid); });
}

RunRecords ReadResultsH5(const std::string& path) {
  H5TableReader reader(path);
  const int64_t version = reader.IntAttribute("/", "format_version");
  if (version != kResultsFormatVersion) {
    throw std::runtime_error("HDF5 file '" + path + "': format_version " + std::to_string(version) +
                             ", this build reads " + std::to_string(kResultsFormatVersion));
  }

  RunRecords records;
  records.requests.resize(reader.ColumnRows("/requests/arrival_ns"));
  auto& requests = records.requests;
  ForEachRequestColumn([&](const char* name, auto member, bool /*is_time*/) {
    using T = std::remove_cvref_t<decltype(RequestRecord{}.*member)>;
    reader.ReadColumn(
        std::string("/requests/") + name, ColumnTypeOf<T>(),
        requests.empty() ? nullptr : reinterpret_cast<std::byte*>(&(requests.front().*member)),
        sizeof(RequestRecord), requests.size());
  });

  records.steps.resize(reader.ColumnRows("/steps/start_ns"));
  auto& steps = records.steps;
  ForEachStepColumn([&](const char* name, auto member, bool /*is_time*/) {
    using T = std::remove_cvref_t<decltype(StepRecord{}.*member)>;
    reader.ReadColumn(
        std::string("/steps/") + name, ColumnTypeOf<T>(),
        steps.empty() ? nullptr : reinterpret_cast<std::byte*>(&(steps.front().*member)),
        sizeof(StepRecord), steps.size());
  });
  for (size_t term = 0; term < kNumStepTerms; ++term) {
    reader.ReadColumn(
        TermDataset(term), H5ColumnType::kInt64,
        steps.empty() ? nullptr : reinterpret_cast<std::byte*>(&steps.front().term_ns[term]),
        sizeof(StepRecord), steps.size());
  }
  return records;
}

RunOutputMeta ReadResultsH5Meta(const std::string& path) {
  const H5TableReader reader(path);
  RunOutputMeta meta;
  meta.provenance =
      ParseJsonAttribute(path, reader.StringAttribute("/", "provenance"), "provenance");
  meta.scenario = ParseJsonAttribute(path, reader.StringAttribute("/", "scenario"), "scenario");
  meta.engine = reader.StringAttribute("/", "engine");
  meta.selector = reader.StringAttribute("/", "selector");
  meta.stop_policy = reader.StringAttribute("/", "stop_policy");
  return meta;
}

}  // namespace feather
