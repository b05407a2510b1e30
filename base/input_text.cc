// input_text.cc: ReadTextFile (POSIX reads, so a failed read is never an early end of file) and
// the UTF-8 check (see input_text.h).
#include "base/input_text.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "base/input_error.h"

namespace feather {

std::optional<size_t> FirstInvalidUtf8(std::string_view text) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char b = bytes[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    size_t length = 0;
    uint32_t code = 0;
    if (b >= 0xC2 && b <= 0xDF) {
      length = 2;
      code = b & 0x1Fu;
    } else if (b >= 0xE0 && b <= 0xEF) {
      length = 3;
      code = b & 0x0Fu;
    } else if (b >= 0xF0 && b <= 0xF4) {
      length = 4;
      code = b & 0x07u;
    } else {
      return i;  // a continuation byte without a lead, 0xC0/0xC1 (overlong) or 0xF5+
    }
    if (i + length > n) return i;
    for (size_t k = 1; k < length; ++k) {
      if ((bytes[i + k] & 0xC0u) != 0x80u) return i;
      code = (code << 6) | (bytes[i + k] & 0x3Fu);
    }
    const bool overlong = (length == 3 && code < 0x800) || (length == 4 && code < 0x10000);
    if (overlong || (code >= 0xD800 && code <= 0xDFFF) || code > 0x10FFFF) return i;
    i += length;
  }
  return std::nullopt;
}

std::string ReadTextFile(const std::string& path, std::string_view what, std::string_view key) {
  const auto fail = [&](const char* verb, int error) {
    return InputError(
        path, 0, std::string(key),
        std::string(verb) + " the " + std::string(what) + ": " + std::strerror(error));
  };
  // POSIX calls, not a stream: a stream reports a failed read (EIO, EISDIR) as an early end of
  // file, and the caller would read a truncated or empty text as valid input.
  struct Descriptor {
    int fd;
    ~Descriptor() {
      if (fd >= 0) ::close(fd);
    }
  } file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) throw fail("cannot open", errno);
  struct stat info {};
  const bool known = ::fstat(file.fd, &info) == 0;
  if (known && S_ISDIR(info.st_mode)) throw fail("cannot read", EISDIR);
  std::string text;
  if (known && S_ISREG(info.st_mode) && info.st_size > 0) {
    text.reserve(static_cast<size_t>(info.st_size));
  }
  char buffer[1 << 14];
  while (true) {
    const ssize_t n = ::read(file.fd, buffer, sizeof(buffer));
    if (n > 0) {
      text.append(buffer, static_cast<size_t>(n));
    } else if (n == 0) {
      return text;
    } else if (errno != EINTR) {
      throw fail("cannot read", errno);
    }
  }
}

std::vector<std::string_view> SplitLines(std::string_view text) {
  std::vector<std::string_view> lines;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    start = end + 1;
  }
  return lines;
}

}  // namespace feather
