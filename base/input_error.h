// input_error.h: the one exception type for bad input files (scenarios, profiles, model
// descriptions, traces, saved policies).
//
// Each problem names the file, the line (1-based; 0 when unknown), the key path or field and
// what was wrong with the value; a loader collects all the problems of a file before throwing, so
// the user fixes them in one pass. what() renders them one per line as
//   FILE:LINE: KEY: MESSAGE
// The CLI prints what() and exits with code 2.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace feather {

struct InputProblem {
  std::string file;
  uint32_t line = 0;
  std::string key;  // dotted key path ("workload.arrival.rate") or trace field name
  std::string message;

  [[nodiscard]] std::string ToString() const;
};

// The problems of one file as a reader finds them: the first `max_shown` kept, the rest counted,
// so a wrong file does not drown the user. ThrowIfAny() throws them as one InputError, ending
// with "N more problems not shown" when some were dropped.
class CappedInputProblems {
 public:
  explicit CappedInputProblems(std::string file, size_t max_shown = 20)
      : file_(std::move(file)), max_shown_(max_shown) {}
  void Add(uint32_t line, std::string key, std::string message);
  void ThrowIfAny();
  [[nodiscard]] bool empty() const { return problems_.empty(); }

 private:
  std::string file_;
  size_t max_shown_;
  std::vector<InputProblem> problems_;
  size_t more_ = 0;
};

class InputError : public std::runtime_error {
 public:
  explicit InputError(std::vector<InputProblem> problems);
  InputError(std::string file, uint32_t line, std::string key, std::string message);

  [[nodiscard]] const std::vector<InputProblem>& problems() const { return problems_; }

 private:
  std::vector<InputProblem> problems_;
};

}  // namespace feather
