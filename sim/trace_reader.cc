// trace_reader.cc: line-by-line Mooncake JSONL parsing and validation (see the header).
#include "sim/trace_reader.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <istream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <utility>

#include "sim/input_error.h"

namespace feather {
namespace {

using Json = nlohmann::json;

// A short rendering of an offending value for the message (a whole hash_ids array would drown it).
std::string Describe(const Json& value) {
  std::string text = value.dump();
  constexpr size_t kMaxChars = 40;
  if (text.size() > kMaxChars) text = text.substr(0, kMaxChars) + "...";
  return std::string(value.type_name()) + " " + text;
}

bool IsBlank(std::string_view line) {
  return line.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

// Collects the problems of one file: keeps the first `max_problems`, counts the rest.
class ProblemList {
 public:
  ProblemList(std::string file, size_t max_problems)
      : file_(std::move(file)), max_problems_(max_problems) {}

  void Add(uint32_t line, std::string key, std::string message) {
    ++total_;
    if (kept_.size() < max_problems_) {
      kept_.push_back(InputProblem{file_, line, std::move(key), std::move(message)});
    }
  }
  [[nodiscard]] bool empty() const { return total_ == 0; }
  [[nodiscard]] size_t total() const { return total_; }

  [[noreturn]] void Throw() {
    if (total_ > kept_.size()) {
      kept_.push_back(InputProblem{file_, 0, "",
                                   std::to_string(total_ - kept_.size()) +
                                       " more problems not shown (" + std::to_string(total_) +
                                       " in all)"});
    }
    throw InputError(std::move(kept_));
  }

 private:
  std::string file_;
  size_t max_problems_;
  size_t total_ = 0;
  std::vector<InputProblem> kept_;
};

// The integer field `key` of `record` if present, an integer and within [min_value, max_value];
// otherwise records why not and returns nothing.
std::optional<int64_t> IntegerField(const Json& record, const char* key, int64_t min_value,
                                    int64_t max_value, uint32_t line, ProblemList& problems) {
  const auto it = record.find(key);
  if (it == record.end()) {
    problems.Add(line, key, "missing field");
    return std::nullopt;
  }
  if (!it->is_number_integer()) {
    problems.Add(line, key, "must be an integer, got " + Describe(*it));
    return std::nullopt;
  }
  // Unsigned JSON values above INT64_MAX are out of range for every field.
  if (it->is_number_unsigned() &&
      it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    problems.Add(line, key, "must be <= " + std::to_string(max_value) + ", got " + it->dump());
    return std::nullopt;
  }
  const int64_t value = it->get<int64_t>();
  if (value < min_value) {
    problems.Add(line, key, "must be >= " + std::to_string(min_value) + ", got " + it->dump());
    return std::nullopt;
  }
  if (value > max_value) {
    problems.Add(line, key, "must be <= " + std::to_string(max_value) + ", got " + it->dump());
    return std::nullopt;
  }
  return value;
}

// Strips nlohmann's "[json.exception.parse_error.101] " tag; the rest says where and why.
std::string ParseErrorText(const Json::parse_error& error) {
  std::string_view text = error.what();
  const size_t tag_end = text.find("] ");
  if (tag_end != std::string_view::npos) text.remove_prefix(tag_end + 2);
  return std::string(text);
}

}  // namespace

MooncakeTrace ParseMooncakeTrace(std::istream& in, const std::string& file_name,
                                 const TraceReadOptions& options) {
  if (options.block_tokens == 0) {
    throw InputError(file_name, 0, "block_tokens", "must be >= 1");
  }
  MooncakeTrace trace;
  ProblemList problems(file_name, options.max_problems);
  constexpr int64_t kMaxTokens = std::numeric_limits<uint32_t>::max();
  constexpr int64_t kMaxTimestampMs = std::numeric_limits<int64_t>::max() / 1'000'000;

  std::string text;
  uint32_t line = 0;
  uint64_t records_seen = 0;  // non-blank lines, good or bad: `limit` counts these
  std::optional<int64_t> previous_timestamp_ms;
  uint32_t previous_timestamp_line = 0;
  while ((options.limit == 0 || records_seen < options.limit) && std::getline(in, text)) {
    ++line;
    if (IsBlank(text)) continue;
    ++records_seen;

    Json record;
    try {
      record = Json::parse(text);
    } catch (const Json::parse_error& error) {
      problems.Add(line, "", "malformed JSON: " + ParseErrorText(error));
      continue;
    }
    if (!record.is_object()) {
      problems.Add(line, "", "a record must be a JSON object, got " + Describe(record));
      continue;
    }

    const std::optional<int64_t> timestamp_ms =
        IntegerField(record, "timestamp", 0, kMaxTimestampMs, line, problems);
    const std::optional<int64_t> input_tokens =
        IntegerField(record, "input_length", 1, kMaxTokens, line, problems);
    const std::optional<int64_t> output_tokens =
        IntegerField(record, "output_length", 1, kMaxTokens, line, problems);

    if (timestamp_ms) {
      // Equal timestamps are legitimate: the real trace has up to 28 requests per millisecond.
      if (previous_timestamp_ms && *timestamp_ms < *previous_timestamp_ms) {
        problems.Add(line, "timestamp",
                     "decreases: " + std::to_string(*timestamp_ms) + " after " +
                         std::to_string(*previous_timestamp_ms) + " on line " +
                         std::to_string(previous_timestamp_line));
      }
      previous_timestamp_ms = timestamp_ms;
      previous_timestamp_line = line;
    }

    const size_t problems_before_ids = problems.total();
    const uint64_t first_block = trace.block_ids.size();
    const auto ids = record.find("hash_ids");
    if (ids == record.end()) {
      problems.Add(line, "hash_ids", "missing field");
    } else if (!ids->is_array()) {
      problems.Add(line, "hash_ids", "must be an array of integers, got " + Describe(*ids));
    } else {
      for (size_t k = 0; k < ids->size(); ++k) {
        const Json& id = (*ids)[k];
        if (!id.is_number_unsigned()) {  // nlohmann stores every non-negative integer unsigned
          problems.Add(line, "hash_ids[" + std::to_string(k) + "]",
                       "must be a non-negative integer, got " + Describe(id));
          break;  // one report per array is enough
        }
        trace.block_ids.push_back(id.get<uint64_t>());
      }
      if (input_tokens && problems.total() == problems_before_ids) {
        const uint64_t expected =
            (static_cast<uint64_t>(*input_tokens) + options.block_tokens - 1) /
            options.block_tokens;
        if (ids->size() != expected) {
          problems.Add(
              line, "hash_ids",
              "has " + std::to_string(ids->size()) + " ids, but input_length " +
                  std::to_string(*input_tokens) + " needs ceil(" + std::to_string(*input_tokens) +
                  "/" + std::to_string(options.block_tokens) + ") = " + std::to_string(expected));
        }
      }
    }

    if (!problems.empty()) {
      // Keep scanning for more problems, but stop storing: the trace will not be used.
      trace.block_ids.resize(first_block);
      continue;
    }
    TraceRecord r;
    r.timestamp_ms = *timestamp_ms;
    r.input_tokens = static_cast<uint32_t>(*input_tokens);
    r.output_tokens = static_cast<uint32_t>(*output_tokens);
    r.first_block = first_block;
    r.block_count = static_cast<uint32_t>(trace.block_ids.size() - first_block);
    trace.records.push_back(r);
    trace.total_input_tokens += r.input_tokens;
  }
  if (in.bad()) problems.Add(line, "", "read error after this line");
  if (!problems.empty()) problems.Throw();
  if (trace.records.empty()) throw InputError(file_name, 0, "", "trace has no records");
  return trace;
}

MooncakeTrace ReadMooncakeTrace(const std::string& path, const TraceReadOptions& options) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    throw InputError(path, 0, "", "cannot read trace: is a directory");
  }
  std::ifstream in(path);
  if (!in) {
    throw InputError(path, 0, "", std::string("cannot open trace: ") + std::strerror(errno));
  }
  return ParseMooncakeTrace(in, path, options);
}

}  // namespace feather
