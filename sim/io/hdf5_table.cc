// hdf5_table.cc: H5TableWriter and H5TableReader over the HDF5 C API (1.10).
#include "sim/io/hdf5_table.h"

#include <hdf5.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace feather {
namespace {

static_assert(std::is_same_v<hid_t, int64_t>, "hdf5_table.h keeps handles as int64_t");
static_assert(sizeof(bool) == 1, "bool columns are copied byte-wise");

// Rows per chunk of a compressed dataset: 256 KiB for 8-byte columns, large enough that deflate
// runs on long buffers, small enough for HDF5's default 1 MiB chunk cache.
constexpr hsize_t kChunkRows = 32768;
// Deflate level 1: most of the size reduction of the higher levels (the shuffled integer
// columns are mostly zero bytes) at a fraction of the time.
constexpr unsigned kDeflateLevel = 1;

// HDF5's constant macros expand to old-style casts and comma expressions; keep them here, behind
// functions, so the rest of the file compiles cleanly under -Wold-style-cast.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
hid_t DefaultPlist() { return H5P_DEFAULT; }
hid_t AllSpace() { return H5S_ALL; }
hid_t DefaultErrorStack() { return H5E_DEFAULT; }
hid_t DatasetCreateClass() { return H5P_DATASET_CREATE; }
hid_t GroupCreateClass() { return H5P_GROUP_CREATE; }
hid_t FileCreateClass() { return H5P_FILE_CREATE; }
hid_t CStringType() { return H5T_C_S1; }
size_t VariableSize() { return H5T_VARIABLE; }
unsigned TruncateFlag() { return H5F_ACC_TRUNC; }
unsigned ReadOnlyFlag() { return H5F_ACC_RDONLY; }

hid_t FileType(H5ColumnType type) {
  switch (type) {
    case H5ColumnType::kInt64:
      return H5T_STD_I64LE;
    case H5ColumnType::kUInt64:
      return H5T_STD_U64LE;
    case H5ColumnType::kUInt32:
      return H5T_STD_U32LE;
    case H5ColumnType::kUInt8:
    case H5ColumnType::kBool:
      return H5T_STD_U8LE;
    case H5ColumnType::kFloat64:
      return H5T_IEEE_F64LE;
  }
  return H5T_STD_U8LE;
}

hid_t MemoryType(H5ColumnType type) {
  switch (type) {
    case H5ColumnType::kInt64:
      return H5T_NATIVE_INT64;
    case H5ColumnType::kUInt64:
      return H5T_NATIVE_UINT64;
    case H5ColumnType::kUInt32:
      return H5T_NATIVE_UINT32;
    case H5ColumnType::kUInt8:
    case H5ColumnType::kBool:
      return H5T_NATIVE_UINT8;
    case H5ColumnType::kFloat64:
      return H5T_NATIVE_DOUBLE;
  }
  return H5T_NATIVE_UINT8;
}

hid_t NativeInt64() { return H5T_NATIVE_INT64; }
hid_t FileInt64() { return H5T_STD_I64LE; }
#pragma GCC diagnostic pop

size_t ElementBytes(H5ColumnType type) {
  switch (type) {
    case H5ColumnType::kInt64:
    case H5ColumnType::kUInt64:
    case H5ColumnType::kFloat64:
      return 8;
    case H5ColumnType::kUInt32:
      return 4;
    case H5ColumnType::kUInt8:
    case H5ColumnType::kBool:
      return 1;
  }
  return 1;
}

const char* TypeName(H5ColumnType type) {
  switch (type) {
    case H5ColumnType::kInt64:
      return "int64";
    case H5ColumnType::kUInt64:
      return "uint64";
    case H5ColumnType::kUInt32:
      return "uint32";
    case H5ColumnType::kUInt8:
      return "uint8";
    case H5ColumnType::kBool:
      return "uint8 (bool)";
    case H5ColumnType::kFloat64:
      return "float64";
  }
  return "?";
}

// Turns HDF5's automatic error printing off for the scope of one public call: failures become
// exceptions carrying the innermost message instead of a stack dump on stderr.
class QuietErrors {
 public:
  QuietErrors() {
    H5Eget_auto2(DefaultErrorStack(), &func_, &data_);
    H5Eset_auto2(DefaultErrorStack(), nullptr, nullptr);
  }
  ~QuietErrors() { H5Eset_auto2(DefaultErrorStack(), func_, data_); }
  QuietErrors(const QuietErrors&) = delete;
  QuietErrors& operator=(const QuietErrors&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// The innermost (most specific) entry of HDF5's error stack, then clears the stack.
std::string TakeHdf5Error() {
  std::string message;
  auto walk = [](unsigned n, const H5E_error2_t* err, void* out) -> herr_t {
    if (n == 0 && err != nullptr && err->desc != nullptr) {
      *static_cast<std::string*>(out) =
          std::string(err->func_name != nullptr ? err->func_name : "?") + ": " + err->desc;
    }
    return 0;
  };
  H5Ewalk2(DefaultErrorStack(), H5E_WALK_UPWARD, walk, &message);
  H5Eclear2(DefaultErrorStack());
  return message.empty() ? "unknown HDF5 error" : message;
}

[[noreturn]] void Fail(const std::string& path, const std::string& object,
                       const std::string& what) {
  std::string message = "HDF5 file '" + path + "'";
  if (!object.empty()) message += ", object '" + object + "'";
  throw std::runtime_error(message + ": " + what);
}

[[noreturn]] void FailHdf5(const std::string& path, const std::string& object,
                           const std::string& what) {
  Fail(path, object, what + " (" + TakeHdf5Error() + ")");
}

// Owns one HDF5 identifier and closes it with the matching H5?close.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Handle() {
    if (id_ >= 0) closer_(id_);
  }
  Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, -1)), closer_(other.closer_) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle& operator=(Handle&&) = delete;
  [[nodiscard]] hid_t get() const { return id_; }

 private:
  hid_t id_;
  Closer closer_;
};

// Wraps a handle-returning call: throws (naming `what`) when it failed.
Handle Checked(hid_t id, Handle::Closer closer, const std::string& path, const std::string& object,
               const char* what) {
  if (id < 0) FailHdf5(path, object, what);
  return {id, closer};
}

void CheckStatus(herr_t status, const std::string& path, const std::string& object,
                 const char* what) {
  if (status < 0) FailHdf5(path, object, what);
}

// Strided copy with the element width known at compile time, so memcpy becomes one move.
template <size_t Width>
void Gather(const std::byte* base, size_t stride, size_t rows, std::byte* out) {
  for (size_t i = 0; i < rows; ++i) std::memcpy(out + i * Width, base + i * stride, Width);
}

template <size_t Width>
void Scatter(const std::byte* in, size_t rows, std::byte* base, size_t stride) {
  for (size_t i = 0; i < rows; ++i) std::memcpy(base + i * stride, in + i * Width, Width);
}

// A variable-length UTF-8 string type (attributes of any length, read by h5py as str).
Handle VariableStringType(const std::string& path, const std::string& object) {
  Handle type = Checked(H5Tcopy(CStringType()), H5Tclose, path, object, "H5Tcopy");
  CheckStatus(H5Tset_size(type.get(), VariableSize()), path, object, "H5Tset_size");
  CheckStatus(H5Tset_cset(type.get(), H5T_CSET_UTF8), path, object, "H5Tset_cset");
  return type;
}

// Creates attribute `name` on `object`, replacing an earlier one of that name.
Handle CreateAttribute(hid_t file, const std::string& path, const std::string& object,
                       const std::string& name, hid_t type) {
  const htri_t exists = H5Aexists_by_name(file, object.c_str(), name.c_str(), DefaultPlist());
  if (exists < 0) FailHdf5(path, object, "H5Aexists_by_name '" + name + "'");
  if (exists > 0) {
    CheckStatus(H5Adelete_by_name(file, object.c_str(), name.c_str(), DefaultPlist()), path, object,
                "H5Adelete_by_name");
  }
  Handle space = Checked(H5Screate(H5S_SCALAR), H5Sclose, path, object, "H5Screate");
  return Checked(H5Acreate_by_name(file, object.c_str(), name.c_str(), type, space.get(),
                                   DefaultPlist(), DefaultPlist(), DefaultPlist()),
                 H5Aclose, path, object, ("H5Acreate_by_name '" + name + "'").c_str());
}

Handle OpenAttribute(hid_t file, const std::string& path, const std::string& object,
                     const std::string& name) {
  return Checked(
      H5Aopen_by_name(file, object.c_str(), name.c_str(), DefaultPlist(), DefaultPlist()), H5Aclose,
      path, object, ("no attribute '" + name + "'").c_str());
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// H5TableWriter

H5TableWriter::H5TableWriter(std::string path) : path_(std::move(path)) {
  const QuietErrors quiet;
  // Root group without timestamps (the file-creation list is a group-creation list), so two
  // writes of the same data give the same bytes.
  Handle fcpl = Checked(H5Pcreate(FileCreateClass()), H5Pclose, path_, "", "H5Pcreate");
  CheckStatus(H5Pset_obj_track_times(fcpl.get(), false), path_, "", "H5Pset_obj_track_times");
  file_ = H5Fcreate(path_.c_str(), TruncateFlag(), fcpl.get(), DefaultPlist());
  if (file_ < 0) FailHdf5(path_, "", "cannot create the file");
}

H5TableWriter::~H5TableWriter() {
  if (file_ >= 0) {
    const QuietErrors quiet;
    H5Fclose(file_);
    H5Eclear2(DefaultErrorStack());
  }
}

void H5TableWriter::CreateGroup(const std::string& group) {
  const QuietErrors quiet;
  Handle gcpl = Checked(H5Pcreate(GroupCreateClass()), H5Pclose, path_, group, "H5Pcreate");
  CheckStatus(H5Pset_obj_track_times(gcpl.get(), false), path_, group, "H5Pset_obj_track_times");
  Handle created =
      Checked(H5Gcreate2(file_, group.c_str(), DefaultPlist(), gcpl.get(), DefaultPlist()),
              H5Gclose, path_, group, "cannot create the group");
}

void H5TableWriter::WriteColumn(const std::string& dataset, H5ColumnType type,
                                const std::byte* base, size_t stride_bytes, size_t rows) {
  const QuietErrors quiet;
  const size_t bytes = ElementBytes(type);
  if (rows > 0) {
    gather_.resize(rows * bytes);  // capacity is kept between columns
    switch (bytes) {
      case 8:
        Gather<8>(base, stride_bytes, rows, gather_.data());
        break;
      case 4:
        Gather<4>(base, stride_bytes, rows, gather_.data());
        break;
      default:
        Gather<1>(base, stride_bytes, rows, gather_.data());
        break;
    }
    if (type == H5ColumnType::kBool) {
      // A bool's object representation is 0 or 1 already; normalise anyway so the stored byte
      // never depends on it.
      for (size_t i = 0; i < rows; ++i) {
        gather_[i] = gather_[i] != std::byte{0} ? std::byte{1} : std::byte{0};
      }
    }
  }

  const hsize_t dims[1] = {static_cast<hsize_t>(rows)};
  Handle space =
      Checked(H5Screate_simple(1, dims, nullptr), H5Sclose, path_, dataset, "H5Screate_simple");
  Handle dcpl = Checked(H5Pcreate(DatasetCreateClass()), H5Pclose, path_, dataset, "H5Pcreate");
  CheckStatus(H5Pset_obj_track_times(dcpl.get(), false), path_, dataset, "H5Pset_obj_track_times");
  if (rows > kChunkThresholdRows && H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0) {
    const hsize_t chunk[1] = {std::min<hsize_t>(dims[0], kChunkRows)};
    CheckStatus(H5Pset_chunk(dcpl.get(), 1, chunk), path_, dataset, "H5Pset_chunk");
    // Byte shuffling first groups the (mostly zero) high bytes of the integers, which makes
    // deflate both faster and smaller.
    if (bytes > 1 && H5Zfilter_avail(H5Z_FILTER_SHUFFLE) > 0) {
      CheckStatus(H5Pset_shuffle(dcpl.get()), path_, dataset, "H5Pset_shuffle");
    }
    CheckStatus(H5Pset_deflate(dcpl.get(), kDeflateLevel), path_, dataset, "H5Pset_deflate");
  }
  Handle set = Checked(H5Dcreate2(file_, dataset.c_str(), FileType(type), space.get(),
                                  DefaultPlist(), dcpl.get(), DefaultPlist()),
                       H5Dclose, path_, dataset, "cannot create the dataset");
  if (rows > 0) {
    CheckStatus(H5Dwrite(set.get(), MemoryType(type), AllSpace(), AllSpace(), DefaultPlist(),
                         gather_.data()),
                path_, dataset, "cannot write the dataset");
  }
}

void H5TableWriter::SetStringAttribute(const std::string& object, const std::string& name,
                                       std::string_view value) {
  const QuietErrors quiet;
  Handle type = VariableStringType(path_, object);
  Handle attribute = CreateAttribute(file_, path_, object, name, type.get());
  // HDF5 takes a C string: the copy adds the terminator (an embedded NUL would cut the value;
  // JSON text never holds one, it escapes it as \u0000).
  const std::string copy(value);
  const char* text = copy.c_str();
  CheckStatus(H5Awrite(attribute.get(), type.get(), &text), path_, object,
              ("cannot write attribute '" + name + "'").c_str());
}

void H5TableWriter::SetIntAttribute(const std::string& object, const std::string& name,
                                    int64_t value) {
  const QuietErrors quiet;
  Handle attribute = CreateAttribute(file_, path_, object, name, FileInt64());
  CheckStatus(H5Awrite(attribute.get(), NativeInt64(), &value), path_, object,
              ("cannot write attribute '" + name + "'").c_str());
}

void H5TableWriter::Close() {
  if (file_ < 0) return;
  const QuietErrors quiet;
  const hid_t file = std::exchange(file_, -1);
  CheckStatus(H5Fclose(file), path_, "", "cannot close (flush) the file");
}

// ---------------------------------------------------------------------------------------------
// H5TableReader

H5TableReader::H5TableReader(std::string path) : path_(std::move(path)) {
  const QuietErrors quiet;
  file_ = H5Fopen(path_.c_str(), ReadOnlyFlag(), DefaultPlist());
  if (file_ < 0) FailHdf5(path_, "", "cannot open the file");
}

H5TableReader::~H5TableReader() {
  if (file_ >= 0) {
    const QuietErrors quiet;
    H5Fclose(file_);
    H5Eclear2(DefaultErrorStack());
  }
}

bool H5TableReader::Exists(const std::string& object) const {
  const QuietErrors quiet;
  // H5Lexists fails, rather than answering false, when an intermediate group is missing: test
  // each prefix of the path in turn.
  size_t end = 0;
  while (end != std::string::npos) {
    end = object.find('/', end + 1);
    const std::string prefix = object.substr(0, end);
    if (prefix.empty() || prefix == "/") continue;
    const htri_t exists = H5Lexists(file_, prefix.c_str(), DefaultPlist());
    if (exists < 0) FailHdf5(path_, prefix, "H5Lexists");
    if (exists == 0) return false;
  }
  return true;
}

size_t H5TableReader::ColumnRows(const std::string& dataset) const {
  const QuietErrors quiet;
  Handle set = Checked(H5Dopen2(file_, dataset.c_str(), DefaultPlist()), H5Dclose, path_, dataset,
                       "no such dataset");
  Handle space = Checked(H5Dget_space(set.get()), H5Sclose, path_, dataset, "H5Dget_space");
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank != 1) Fail(path_, dataset, "expected a 1-D dataset, found rank " + std::to_string(rank));
  hsize_t dims[1] = {0};
  CheckStatus(H5Sget_simple_extent_dims(space.get(), dims, nullptr), path_, dataset,
              "H5Sget_simple_extent_dims");
  return static_cast<size_t>(dims[0]);
}

void H5TableReader::ReadColumn(const std::string& dataset, H5ColumnType type, std::byte* base,
                               size_t stride_bytes, size_t rows) {
  const size_t stored_rows = ColumnRows(dataset);
  const QuietErrors quiet;
  if (stored_rows != rows) {
    Fail(path_, dataset,
         "has " + std::to_string(stored_rows) + " rows, expected " + std::to_string(rows));
  }
  Handle set = Checked(H5Dopen2(file_, dataset.c_str(), DefaultPlist()), H5Dclose, path_, dataset,
                       "no such dataset");
  Handle stored = Checked(H5Dget_type(set.get()), H5Tclose, path_, dataset, "H5Dget_type");
  const size_t bytes = ElementBytes(type);
  const H5T_class_t stored_class = H5Tget_class(stored.get());
  const bool same_width = H5Tget_size(stored.get()) == bytes;
  bool matches = false;
  if (type == H5ColumnType::kFloat64) {
    matches = stored_class == H5T_FLOAT && same_width;
  } else {
    const bool want_signed = type == H5ColumnType::kInt64;
    matches = stored_class == H5T_INTEGER && same_width &&
              (H5Tget_sign(stored.get()) == H5T_SGN_2) == want_signed;
  }
  if (!matches) Fail(path_, dataset, std::string("is not stored as ") + TypeName(type));
  if (rows == 0) return;
  scatter_.resize(rows * bytes);
  CheckStatus(
      H5Dread(set.get(), MemoryType(type), AllSpace(), AllSpace(), DefaultPlist(), scatter_.data()),
      path_, dataset, "cannot read the dataset");
  if (type == H5ColumnType::kBool) {
    // Never copy a stored byte other than 0/1 into a bool.
    for (size_t i = 0; i < rows; ++i) {
      scatter_[i] = scatter_[i] != std::byte{0} ? std::byte{1} : std::byte{0};
    }
  }
  switch (bytes) {
    case 8:
      Scatter<8>(scatter_.data(), rows, base, stride_bytes);
      break;
    case 4:
      Scatter<4>(scatter_.data(), rows, base, stride_bytes);
      break;
    default:
      Scatter<1>(scatter_.data(), rows, base, stride_bytes);
      break;
  }
}

std::string H5TableReader::StringAttribute(const std::string& object,
                                           const std::string& name) const {
  const QuietErrors quiet;
  Handle attribute = OpenAttribute(file_, path_, object, name);
  Handle stored = Checked(H5Aget_type(attribute.get()), H5Tclose, path_, object, "H5Aget_type");
  if (H5Tget_class(stored.get()) != H5T_STRING) {
    Fail(path_, object, "attribute '" + name + "' is not a string");
  }
  const htri_t variable = H5Tis_variable_str(stored.get());
  if (variable < 0) FailHdf5(path_, object, "H5Tis_variable_str");
  if (variable > 0) {
    Handle type = VariableStringType(path_, object);
    char* text = nullptr;
    CheckStatus(H5Aread(attribute.get(), type.get(), &text), path_, object,
                ("cannot read attribute '" + name + "'").c_str());
    std::string value = text != nullptr ? text : "";
    H5free_memory(text);
    return value;
  }
  // Fixed-length strings (files written by other tools): read and cut at the first NUL.
  const size_t size = H5Tget_size(stored.get());
  Handle type = Checked(H5Tcopy(CStringType()), H5Tclose, path_, object, "H5Tcopy");
  CheckStatus(H5Tset_size(type.get(), size + 1), path_, object, "H5Tset_size");
  std::string value(size + 1, '\0');
  CheckStatus(H5Aread(attribute.get(), type.get(), value.data()), path_, object,
              ("cannot read attribute '" + name + "'").c_str());
  value.resize(std::strlen(value.c_str()));
  return value;
}

int64_t H5TableReader::IntAttribute(const std::string& object, const std::string& name) const {
  const QuietErrors quiet;
  Handle attribute = OpenAttribute(file_, path_, object, name);
  Handle stored = Checked(H5Aget_type(attribute.get()), H5Tclose, path_, object, "H5Aget_type");
  if (H5Tget_class(stored.get()) != H5T_INTEGER) {
    Fail(path_, object, "attribute '" + name + "' is not an integer");
  }
  int64_t value = 0;
  CheckStatus(H5Aread(attribute.get(), NativeInt64(), &value), path_, object,
              ("cannot read attribute '" + name + "'").c_str());
  return value;
}

}  // namespace feather
