// input_error.h: the one exception type for bad input files (scenarios, profiles, model
// descriptions, traces, saved policies).
//
// Each problem names the file, the line (1-based; 0 when unknown), the key path or field and
// what was wrong with the value; a loader collects all the problems of a file before throwing, so
// the user fixes them in one pass. what() renders them one per line as
//   FILE:LINE: KEY: MESSAGE
// The CLI prints what() and exits with code 2.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace feather {

struct InputProblem {
  std::string file;
  uint32_t line = 0;
  std::string key;  // dotted key path ("workload.arrival.rate") or trace field name
  std::string message;

  [[nodiscard]] std::string ToString() const;
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
