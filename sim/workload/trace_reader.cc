// trace_reader.cc: line-by-line Mooncake JSONL parsing and validation (see the header).
#include "sim/workload/trace_reader.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <istream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "base/input_error.h"
#include "base/input_text.h"

namespace feather {
namespace {

using Json = nlohmann::json;

constexpr size_t kExcerptChars = 40;

// Appends `text` as a JSON string, its first max_chars + 1 bytes at most (a cut sequence is
// replaced, not rejected; the caller cuts the excerpt short anyway).
void AppendString(const std::string& text, size_t max_chars, std::string& out) {
  out += Json(text.substr(0, max_chars + 1)).dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Appends the compact JSON text of `value` (what dump() writes) to `out`, stopping soon after
// `out` exceeds `max_chars`: the work is bounded by max_chars, not by the value, and so is the
// recursion (each level writes a bracket first).
void AppendExcerpt(const Json& value, size_t max_chars, std::string& out) {
  if (value.is_array()) {
    out += '[';
    for (size_t i = 0; i < value.size() && out.size() <= max_chars; ++i) {
      if (i > 0) out += ',';
      AppendExcerpt(value[i], max_chars, out);
    }
    out += ']';
  } else if (value.is_object()) {
    out += '{';
    for (auto it = value.begin(); it != value.end() && out.size() <= max_chars; ++it) {
      if (it != value.begin()) out += ',';
      AppendString(it.key(), max_chars, out);
      out += ':';
      AppendExcerpt(it.value(), max_chars, out);
    }
    out += '}';
  } else if (value.is_string()) {
    AppendString(value.get_ref<const std::string&>(), max_chars, out);
  } else {
    out += value.dump();  // a number, a boolean or null: a few characters
  }
}

// A short rendering of an offending value for the message, "TYPE TEXT": the first 40 characters
// of its JSON text, then "..." (a whole hash_ids array would drown the message). Never
// serialises more than it shows.
std::string Describe(const Json& value) {
  std::string text;
  AppendExcerpt(value, kExcerptChars, text);
  if (text.size() > kExcerptChars) {
    size_t cut = kExcerptChars;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0u) == 0x80u) --cut;  // UTF-8
    text.resize(cut);
    text += "...";
  }
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

// Strips nlohmann's "[json.exception.parse_error.101] " tag and its "line 1, " (a record is one
// line: the column is what locates the error); the rest says where and why.
std::string ParseErrorText(const Json::exception& error) {
  std::string text = error.what();
  const size_t tag_end = text.find("] ");
  if (tag_end != std::string::npos) text.erase(0, tag_end + 2);
  const size_t line_one = text.find("line 1, ");
  if (line_one != std::string::npos) text.erase(line_one, 8);
  return text;
}

// Parses one record, noting its top-level keys: the last one read (what a syntax error is
// reported under) and the first one given twice (nlohmann would silently keep the last value).
// An array or object nested deeper than kMaxInputNesting stops the parse at once (too_deep; the
// record is then null), before the value grows any deeper.
struct ParsedLine {
  Json record;
  std::string last_key;
  std::string duplicate_key;
  bool too_deep = false;
};

struct NestedTooDeep {};

void ParseRecord(std::string_view text, ParsedLine& out) {
  std::vector<std::string> keys;
  out.last_key.clear();
  out.duplicate_key.clear();
  out.too_deep = false;
  const Json::parser_callback_t note_keys = [&](int depth, Json::parse_event_t event,
                                                Json& parsed) {
    // `depth` counts the arrays and objects already open around this one.
    if ((event == Json::parse_event_t::array_start || event == Json::parse_event_t::object_start) &&
        depth >= kMaxInputNesting) {
      throw NestedTooDeep{};
    }
    if (depth == 1 && event == Json::parse_event_t::key && parsed.is_string()) {
      out.last_key = parsed.get<std::string>();
      if (std::find(keys.begin(), keys.end(), out.last_key) != keys.end()) {
        if (out.duplicate_key.empty()) out.duplicate_key = out.last_key;
      } else {
        keys.push_back(out.last_key);
      }
    }
    return true;
  };
  try {
    out.record = Json::parse(text, note_keys);
  } catch (const NestedTooDeep&) {
    out.record = nullptr;
    out.too_deep = true;
  }
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
  // Replay multiplies by 1e6 (ms -> ns) and time_scale: beyond this the arrival time would
  // overflow simulated time (int64 ns), so say so here, at the record, not later without a line.
  const int64_t max_timestamp_ms =
      options.max_timestamp_ms > 0 ? options.max_timestamp_ms : kTraceMaxTimestampMs;

  std::string text;
  ParsedLine parsed;
  uint32_t line = 0;
  uint64_t records_seen = 0;  // non-blank lines, good or bad: `limit` counts these
  uint64_t input_total = 0;   // input_length so far (for max_total_tokens)
  bool total_reported = false;
  std::optional<int64_t> previous_timestamp_ms;
  uint32_t previous_timestamp_line = 0;
  errno = 0;  // what a failed read sets is reported below
  while ((options.limit == 0 || records_seen < options.limit) && std::getline(in, text)) {
    ++line;
    if (IsBlank(text)) continue;
    ++records_seen;

    if (options.max_records > 0 && records_seen > options.max_records) {
      problems.Add(line, "",
                   "the trace has more than " + std::to_string(options.max_records) +
                       " records, over the limit of " + std::to_string(options.max_records) +
                       " requests (limits.max_requests); raise it with `limits: {max_requests: "
                       "N}` in the scenario or --set limits.max_requests=N, or replay fewer "
                       "with workload.trace.limit");
      break;
    }
    // Bytes that are not UTF-8 are reported by position, under the field they are in, without
    // echoing them (the parser's message would).
    if (const std::optional<size_t> bad = FirstInvalidUtf8(text)) {
      try {
        ParseRecord(std::string_view(text).substr(0, *bad), parsed);
      } catch (const Json::exception&) {
        // expected: the prefix is cut short; parsed.last_key is the field the bytes are in
      }
      char byte[8];
      std::snprintf(byte, sizeof(byte), "0x%02X", static_cast<unsigned char>(text[*bad]));
      problems.Add(
          line, parsed.last_key,
          std::string("not valid UTF-8: byte ") + byte + " at column " + std::to_string(*bad + 1));
      continue;
    }
    try {
      ParseRecord(text, parsed);
    } catch (const Json::exception& error) {  // parse_error, or out_of_range for 1e999
      const std::string what = ParseErrorText(error);
      problems.Add(line, parsed.last_key,
                   parsed.last_key.empty() ? "malformed JSON: " + what
                                           : "malformed JSON in or after this field: " + what);
      continue;
    }
    if (parsed.too_deep) {
      problems.Add(line, parsed.last_key,
                   "arrays and objects nested deeper than " + std::to_string(kMaxInputNesting) +
                       " levels (a record is a flat JSON object)");
      continue;
    }
    const Json& record = parsed.record;
    if (!record.is_object()) {
      problems.Add(line, "", "a record must be a JSON object, got " + Describe(record));
      continue;
    }
    if (!parsed.duplicate_key.empty()) {
      problems.Add(line, parsed.duplicate_key,
                   "given twice in one record (which value is meant is ambiguous)");
      continue;
    }

    const std::optional<int64_t> timestamp_ms =
        IntegerField(record, "timestamp", 0, max_timestamp_ms, line, problems);
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

    // An input_length over the limit is the one problem of its line: its hash_ids (counted
    // for a length that will not be used) are not checked against it.
    const bool input_over_limit = input_tokens && options.max_input_tokens > 0 &&
                                  static_cast<uint64_t>(*input_tokens) > options.max_input_tokens;
    if (input_over_limit) {
      problems.Add(line, "input_length",
                   std::to_string(*input_tokens) + " tokens exceed the limit of " +
                       std::to_string(options.max_input_tokens) +
                       " tokens per prompt (limits.max_prompt_tokens); raise it with `limits: "
                       "{max_prompt_tokens: N}` in the scenario or --set "
                       "limits.max_prompt_tokens=N");
    } else if (input_tokens && options.max_total_tokens > 0) {
      input_total += static_cast<uint64_t>(*input_tokens);
      if (input_total > options.max_total_tokens && !total_reported) {
        total_reported = true;
        problems.Add(line, "input_length",
                     "the prompts up to this record hold " + std::to_string(input_total) +
                         " tokens, over the limit of " + std::to_string(options.max_total_tokens) +
                         " (limits.max_total_tokens); raise it with `limits: {max_total_tokens: "
                         "N}` in the scenario or --set limits.max_total_tokens=N, or replay "
                         "fewer records with workload.trace.limit");
      }
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
      if (input_tokens && !input_over_limit && problems.total() == problems_before_ids) {
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
  if (in.bad()) {
    const int error = errno;  // set by the read that failed
    problems.Add(line, "",
                 std::string("cannot read the trace") + (line > 0 ? " after this line" : "") +
                     ": " + (error != 0 ? std::strerror(error) : "read error"));
  }
  if (!problems.empty()) problems.Throw();
  if (trace.records.empty()) {
    throw InputError(file_name, 1, "timestamp",
                     "missing: the trace has no records (expected one JSON object per line with "
                     "timestamp, input_length, output_length and hash_ids)");
  }
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
