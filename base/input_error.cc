// input_error.cc: formatting of input problems.
#include "base/input_error.h"

#include <utility>

namespace feather {
namespace {

std::string Render(const std::vector<InputProblem>& problems) {
  std::string text;
  for (const InputProblem& p : problems) {
    if (!text.empty()) text += '\n';
    text += p.ToString();
  }
  return text;
}

}  // namespace

std::string InputProblem::ToString() const {
  std::string text = file;
  if (line > 0) {
    text += ':';  // two appends: GCC 12 warns (-Wrestrict, a false positive) on ":" + to_string
    text += std::to_string(line);
  }
  text += ": ";
  if (!key.empty()) text += key + ": ";
  text += message;
  return text;
}

InputError::InputError(std::vector<InputProblem> problems)
    : std::runtime_error(Render(problems)), problems_(std::move(problems)) {}

InputError::InputError(std::string file, uint32_t line, std::string key, std::string message)
    : InputError(std::vector<InputProblem>{
          InputProblem{std::move(file), line, std::move(key), std::move(message)}}) {}

void CappedInputProblems::Add(uint32_t line, std::string key, std::string message) {
  if (problems_.size() < max_shown_) {
    problems_.push_back({file_, line, std::move(key), std::move(message)});
  } else {
    ++more_;
  }
}

void CappedInputProblems::ThrowIfAny() {
  if (problems_.empty()) return;
  if (more_ > 0) {
    problems_.push_back({file_, 0, "", std::to_string(more_) + " more problems not shown"});
  }
  throw InputError(std::move(problems_));
}

}  // namespace feather
