// input_error_test_support.h: what a loader's InputError says, for tests of bad input.
#pragma once

#include <string>

#include "base/input_error.h"

namespace feather::test {

// The rendered problems of the InputError `load` throws, one per line ("" when it throws none).
template <typename Load>
std::string ErrorOf(Load load) {
  try {
    load();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace feather::test
