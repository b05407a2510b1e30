// hdf5_table.h: a small RAII layer over the HDF5 C API for column tables — files of groups holding
// 1-D datasets of fixed-width integers or float64, plus scalar attributes — which is all
// results.h5 and the hardware microbenchmark tables (calib/bench_table.h) need.
//
// Use H5TableWriter to write a file and H5TableReader to read one back; sim/io/run_output.cc is the
// main user. Columns are gathered from (or scattered into) arrays of records with a byte stride,
// so callers write a struct field straight from a std::vector<Record> without building a vector
// per column; the gather goes through one buffer the writer reuses. Datasets longer than
// kChunkThresholdRows are chunked and compressed (shuffle + deflate level 1) when the library has
// those filters; shorter ones, empty ones included, are stored contiguously.
//
// Files are little-endian whatever the host, and written without object timestamps, so the same
// calls give the same file bytes. Every failure throws std::runtime_error naming the file, the
// object and the innermost HDF5 error; HDF5's own printing to stderr is suppressed meanwhile.
// Costs: one write or read is O(rows) plus HDF5's per-object overhead (tens of µs).
//
// Only this header's .cc includes hdf5.h: handles are kept as int64_t (HDF5 1.10's hid_t).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace feather {

// Element types of a column. kBool is stored as uint8 0/1 and read back as bool (any non-zero
// byte is true), so a bool field never receives an invalid byte. kFloat64 is an IEEE double
// (measured times and rates in calib/bench_table.h).
enum class H5ColumnType : uint8_t { kInt64, kUInt64, kUInt32, kUInt8, kBool, kFloat64 };

// Rows above which a dataset is chunked and compressed: below it the filters cost more in
// metadata than they save.
inline constexpr size_t kChunkThresholdRows = 4096;

class H5TableWriter {
 public:
  // Creates (or truncates) the file at `path`.
  explicit H5TableWriter(std::string path);
  ~H5TableWriter();
  H5TableWriter(const H5TableWriter&) = delete;
  H5TableWriter& operator=(const H5TableWriter&) = delete;

  // Creates a group; `group` is an absolute path ("/steps/term"), its parent must exist.
  void CreateGroup(const std::string& group);

  // Writes dataset `dataset` (absolute path) of `rows` elements of `type`, element i read from
  // base + i * stride_bytes. `base` may be null when rows == 0.
  void WriteColumn(const std::string& dataset, H5ColumnType type, const std::byte* base,
                   size_t stride_bytes, size_t rows);

  // Scalar attributes on an object (a group or dataset path; "/" for the root). Strings are
  // variable-length UTF-8, so any length fits and h5py reads them as str.
  void SetStringAttribute(const std::string& object, const std::string& name,
                          std::string_view value);
  void SetIntAttribute(const std::string& object, const std::string& name, int64_t value);

  // Flushes and closes the file; a failure here throws, unlike in the destructor, which only
  // releases what is still open. Call it once before relying on the file.
  void Close();

 private:
  std::string path_;
  int64_t file_ = -1;
  std::vector<std::byte> gather_;  // reused for every column: no allocation per row or column
};

class H5TableReader {
 public:
  // Opens `path` read-only.
  explicit H5TableReader(std::string path);
  ~H5TableReader();
  H5TableReader(const H5TableReader&) = delete;
  H5TableReader& operator=(const H5TableReader&) = delete;

  [[nodiscard]] bool Exists(const std::string& object) const;
  // Number of elements of a 1-D dataset; throws if it is not 1-D.
  [[nodiscard]] size_t ColumnRows(const std::string& dataset) const;
  // Reads a 1-D dataset of exactly `rows` elements into base + i * stride_bytes. The stored type
  // must be the type `type` writes (same class, width and signedness; byte order may differ):
  // a mismatch throws rather than letting HDF5 clip or round values silently.
  void ReadColumn(const std::string& dataset, H5ColumnType type, std::byte* base,
                  size_t stride_bytes, size_t rows);

  [[nodiscard]] std::string StringAttribute(const std::string& object,
                                            const std::string& name) const;
  [[nodiscard]] int64_t IntAttribute(const std::string& object, const std::string& name) const;

 private:
  std::string path_;
  int64_t file_ = -1;
  std::vector<std::byte> scatter_;  // reused for every column
};

}  // namespace feather
