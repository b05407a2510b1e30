// embedded_files.h: text files compiled into the binary (cmake/EmbedFiles.cmake): the default
// scenario, the shipped device profiles and the model descriptions. A scenario names a built-in
// profile or model by its short name ("rtx6000-ada", "llama-3-8b"); anything with a '/' or a
// ".yaml" suffix is a path on disk instead.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace feather {

struct EmbeddedFile {
  std::string_view path;  // relative to the source tree, e.g. "results/profiles/h100-sxm.yaml"
  std::string_view text;
};

[[nodiscard]] std::span<const EmbeddedFile> EmbeddedFiles();
[[nodiscard]] std::optional<std::string_view> FindEmbeddedFile(std::string_view path);

}  // namespace feather
