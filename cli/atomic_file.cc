// atomic_file.cc: WriteFileAtomically (see atomic_file.h).
#include "cli/atomic_file.h"

#include <unistd.h>

#include <fstream>
#include <stdexcept>
#include <system_error>

#include "cli/interrupt.h"

namespace feather {

namespace fs = std::filesystem;

void WriteFileAtomically(const fs::path& path, const std::string& text) {
  const fs::path temp = path.string() + ".partial-" + std::to_string(getpid());
  const TempPathGuard guard(temp.string());
  {
    std::ofstream file(temp, std::ios::binary | std::ios::trunc);
    file << text;
    file.close();
    if (!file) {
      std::error_code ignored;
      fs::remove(temp, ignored);
      throw std::runtime_error("cannot write '" + temp.string() + "'");
    }
  }
  std::error_code error;
  fs::rename(temp, path, error);
  if (error) {
    fs::remove(temp, error);
    throw std::runtime_error("cannot rename '" + temp.string() + "' to '" + path.string() + "'");
  }
}

}  // namespace feather
