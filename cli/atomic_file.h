// atomic_file.h: writing a small output file so that readers never see half of it.
#pragma once

#include <filesystem>
#include <string>

namespace feather {

// Writes `text` to PATH.partial-<pid> (removed on SIGINT/SIGTERM through TempPathGuard,
// cli/interrupt.h) and renames it onto `path`. The folder must exist. Throws std::runtime_error
// naming the file when the write or the rename fails; the temp file is then removed.
void WriteFileAtomically(const std::filesystem::path& path, const std::string& text);

}  // namespace feather
