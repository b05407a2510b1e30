// embedded_files.cc: lookup in the generated table of embedded files.
#include "sim/io/embedded_files.h"

namespace feather {

std::optional<std::string_view> FindEmbeddedFile(std::string_view path) {
  for (const EmbeddedFile& file : EmbeddedFiles()) {
    if (file.path == path) return file.text;
  }
  return std::nullopt;
}

}  // namespace feather
