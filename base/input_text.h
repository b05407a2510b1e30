// input_text.h: reading an input file's text, and the checks every reader of a text format makes
// before parsing (UTF-8, nesting depth). Used by the YAML readers (sim/io), the trace reader
// (sim/workload), the calibration-row reader (calib) and the sweep reader (cli).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace feather {

// Lists and maps in an input file (a YAML scenario, profile, model or sweep; a trace record's
// JSON) nest at most this deep, the top level counting as one. Deeper is an input problem,
// found while parsing, before anything recurses over the value: a line of 100,000 '[' would
// otherwise overflow the stack. The real files nest fewer than 8 levels.
inline constexpr int kMaxInputNesting = 64;

// Offset of the first byte of `text` that does not belong to a well-formed UTF-8 sequence
// (overlong forms, surrogates and code points above U+10FFFF included), or nullopt. O(size).
[[nodiscard]] std::optional<size_t> FirstInvalidUtf8(std::string_view text);
// The lines of `text`, split at '\n' with a trailing '\r' dropped (CRLF files read like LF
// ones); no entry after a final newline. The views point into `text`. O(size).
[[nodiscard]] std::vector<std::string_view> SplitLines(std::string_view text);
// The whole file. InputError (under `key`, without a line) "cannot open the <what>: <reason>"
// when it cannot be opened, and "cannot read the <what>: <reason>" when reading fails (a
// directory: "Is a directory"; /proc/self/mem: "Input/output error"): a failed read is never
// taken for an empty file.
[[nodiscard]] std::string ReadTextFile(const std::string& path, std::string_view what,
                                       std::string_view key = "");

}  // namespace feather
