// Tests for calib/bench_table.h: a round trip of every column kind (values, kinds, labels,
// attributes, order), the stored layout read back through sim/io/hdf5_table.h (a golden of the
// file format other tools read), provenance, the atomic write, and every error path.
#include "calib/bench_table.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/io/hdf5_table.h"

namespace feather::hw {
namespace {

namespace fs = std::filesystem;

class BenchTableTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() / ("bench_table_test_" + std::to_string(getpid()) + "_" +
                                     testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  [[nodiscard]] fs::path Path(const std::string& name) const { return dir_ / name; }

  static HostInfo Host() {
    HostInfo host = ReadHostInfo();
    host.hostname = "golden-host";
    return host;
  }

  // Two tables: GEMM timings with every column kind, and an empty one.
  static std::vector<BenchTable> SampleTables() {
    BenchTable gemm;
    gemm.name = "gemm";
    gemm.AddColumn("backend", {0, 1, 1}, BenchColumnKind::kLabel, {"eigen", "blas"});
    gemm.AddColumn("m", {1, 17, 512}, BenchColumnKind::kInt64);
    gemm.AddColumn("seconds", {1.5e-6, 0.25, std::numeric_limits<double>::denorm_min()});
    gemm.AddColumn("flops_per_s", {-0.0, 1e300, 3.0});
    gemm.attributes["verification"] = "ok";
    gemm.attributes["note"] = "unicode µs and \"quotes\"";
    BenchTable empty;
    empty.name = "empty table";
    empty.AddColumn("x", {});
    return {gemm, empty};
  }

  fs::path dir_;
};

TEST_F(BenchTableTest, RoundTripKeepsValuesKindsLabelsAndOrder) {
  const auto tables = SampleTables();
  WriteBenchTables(Path("t.h5"), tables, Host(), "feather bench --quick");
  const auto read = ReadBenchTables(Path("t.h5"));
  ASSERT_EQ(read.size(), 2u);
  for (size_t t = 0; t < tables.size(); ++t) {
    EXPECT_EQ(read[t].name, tables[t].name);
    EXPECT_EQ(read[t].column_names, tables[t].column_names);
    ASSERT_EQ(read[t].columns.size(), tables[t].columns.size());
    for (size_t c = 0; c < tables[t].columns.size(); ++c) {
      EXPECT_EQ(read[t].KindOf(c), tables[t].KindOf(c)) << tables[t].column_names[c];
      ASSERT_EQ(read[t].columns[c].size(), tables[t].columns[c].size());
      for (size_t r = 0; r < tables[t].columns[c].size(); ++r) {
        // Bit-exact, signed zero included.
        EXPECT_EQ(std::signbit(read[t].columns[c][r]), std::signbit(tables[t].columns[c][r]));
        EXPECT_EQ(read[t].columns[c][r], tables[t].columns[c][r]);
      }
    }
    EXPECT_EQ(read[t].column_labels, tables[t].column_labels);
    for (const auto& [name, value] : tables[t].attributes) {
      EXPECT_EQ(read[t].attributes.at(name), value) << name;
    }
  }
  EXPECT_EQ(read[0].Column("m"), (std::vector<double>{1, 17, 512}));
  EXPECT_EQ(read[0].Rows(), 3u);
  EXPECT_EQ(read[1].Rows(), 0u);
  EXPECT_THROW((void)read[0].Column("nope"), std::out_of_range);
}

TEST_F(BenchTableTest, EveryTableCarriesProvenance) {
  WriteBenchTables(Path("t.h5"), SampleTables(), Host(), "feather bench 'a b'");
  const auto read = ReadBenchTables(Path("t.h5"));
  for (const BenchTable& table : read) {
    const auto host = nlohmann::json::parse(table.attributes.at("host"));
    EXPECT_EQ(host.at("hostname"), "golden-host");
    EXPECT_EQ(table.attributes.at("command_line"), "feather bench 'a b'");
    EXPECT_EQ(table.attributes.at("date_utc").size(), 20u);  // 2024-05-01T12:00:00Z
  }
  // Rewriting tables read from a file keeps the provenance of the run that measured them.
  HostInfo other = Host();
  other.hostname = "second-host";
  WriteBenchTables(Path("merged.h5"), read, other, "feather merge");
  const auto merged = ReadBenchTables(Path("merged.h5"));
  EXPECT_EQ(nlohmann::json::parse(merged[0].attributes.at("host")).at("hostname"), "golden-host");
  EXPECT_EQ(merged[0].attributes.at("command_line"), "feather bench 'a b'");
  const H5TableReader root(Path("merged.h5").string());
  EXPECT_EQ(nlohmann::json::parse(root.StringAttribute("/", "host")).at("hostname"), "second-host");
  EXPECT_EQ(root.StringAttribute("/", "command_line"), "feather merge");
}

// The stored layout, read with the plain column reader as h5py or another tool would.
TEST_F(BenchTableTest, GoldenLayout) {
  WriteBenchTables(Path("t.h5"), SampleTables(), Host(), "cmd");
  H5TableReader reader(Path("t.h5").string());
  EXPECT_EQ(reader.StringAttribute("/", "format"), "feather-bench-tables");
  EXPECT_EQ(reader.IntAttribute("/", "format_version"), 1);
  EXPECT_EQ(reader.StringAttribute("/", "tables"), R"(["gemm","empty table"])");
  EXPECT_EQ(reader.StringAttribute("/gemm", "columns"),
            R"(["backend","m","seconds","flops_per_s"])");
  EXPECT_EQ(reader.StringAttribute("/gemm", "column_kinds"),
            R"(["label","int64","float64","float64"])");
  EXPECT_EQ(reader.StringAttribute("/gemm", "attribute_names"),
            R"(["command_line","date_utc","host","note","verification"])");
  EXPECT_EQ(reader.StringAttribute("/gemm/backend", "labels"), R"(["eigen","blas"])");
  std::vector<int64_t> codes(3);
  reader.ReadColumn("/gemm/backend", H5ColumnType::kInt64,
                    reinterpret_cast<std::byte*>(codes.data()), sizeof(int64_t), 3);
  EXPECT_EQ(codes, (std::vector<int64_t>{0, 1, 1}));
  std::vector<double> seconds(3);
  reader.ReadColumn("/gemm/seconds", H5ColumnType::kFloat64,
                    reinterpret_cast<std::byte*>(seconds.data()), sizeof(double), 3);
  EXPECT_EQ(seconds[1], 0.25);
  // Types are checked: a float64 column is not an int64 one and vice versa.
  EXPECT_THROW(reader.ReadColumn("/gemm/seconds", H5ColumnType::kInt64,
                                 reinterpret_cast<std::byte*>(codes.data()), sizeof(int64_t), 3),
               std::runtime_error);
  EXPECT_THROW(reader.ReadColumn("/gemm/m", H5ColumnType::kFloat64,
                                 reinterpret_cast<std::byte*>(seconds.data()), sizeof(double), 3),
               std::runtime_error);
  EXPECT_EQ(reader.ColumnRows("/empty table/x"), 0u);
}

TEST_F(BenchTableTest, WriteIsAtomicAndLeavesNoTemporary) {
  const fs::path path = Path("t.h5");
  WriteBenchTables(path, SampleTables(), Host(), "first");
  // A rejected write leaves the previous file intact and no temporary behind.
  BenchTable bad;
  bad.name = "bad/name";
  EXPECT_THROW(WriteBenchTables(path, {bad}, Host(), "second"), std::invalid_argument);
  EXPECT_EQ(ReadBenchTables(path).size(), 2u);
  // A write that fails in HDF5 (no such folder) throws and leaves nothing.
  EXPECT_THROW(WriteBenchTables(Path("missing/t.h5"), SampleTables(), Host(), "x"),
               std::runtime_error);
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    files.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(files, std::vector<std::string>{"t.h5"});
  // An overwrite replaces the file.
  WriteBenchTables(path, {SampleTables()[1]}, Host(), "third");
  EXPECT_EQ(ReadBenchTables(path).size(), 1u);
}

TEST_F(BenchTableTest, RejectsInvalidTables) {
  const auto rejects = [&](const BenchTable& table, const std::string& fragment) {
    try {
      WriteBenchTables(Path("t.h5"), {table}, Host(), "x");
      ADD_FAILURE() << "accepted, expected an error with '" << fragment << "'";
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
    }
  };
  BenchTable base;
  base.name = "t";
  base.AddColumn("a", {1, 2});

  BenchTable table = base;
  table.name = "";
  rejects(table, "invalid table name");
  table = base;
  table.name = "..";
  rejects(table, "invalid table name");
  table = base;
  table.AddColumn("b", {1});
  rejects(table, "column 'b' has 1 rows");
  table = base;
  table.AddColumn("a", {3, 4});
  rejects(table, "duplicate column 'a'");
  table = base;
  table.AddColumn("x/y", {3, 4});
  rejects(table, "invalid column name");
  table = base;
  table.AddColumn("n", {1, 2.5}, BenchColumnKind::kInt64);
  rejects(table, "is not an int64");
  table = base;
  table.AddColumn("n", {1, std::nan("")}, BenchColumnKind::kInt64);
  rejects(table, "is not an int64");
  table = base;
  table.AddColumn("n", {0, 2}, BenchColumnKind::kLabel, {"x", "y"});
  rejects(table, "is not a label code");
  table = base;
  table.AddColumn("n", {0, 1}, BenchColumnKind::kLabel, {"x", "y"});
  table.column_labels.clear();
  rejects(table, "has no column_labels entry");
  table = base;
  table.columns.push_back({1, 2});
  rejects(table, "1 column names for 2 columns");
  table = base;
  table.column_kinds = {BenchColumnKind::kFloat64, BenchColumnKind::kInt64};
  rejects(table, "column_kinds");
  table = base;
  table.attributes["columns"] = "x";
  rejects(table, "reserved");
  EXPECT_THROW(WriteBenchTables(Path("t.h5"), {base, base}, Host(), "x"), std::invalid_argument);
}

TEST_F(BenchTableTest, ReadRejectsOtherFiles) {
  EXPECT_THROW((void)ReadBenchTables(Path("absent.h5")), std::runtime_error);
  {
    std::ofstream text(Path("text.h5"));
    text << "not hdf5";
  }
  EXPECT_THROW((void)ReadBenchTables(Path("text.h5")), std::runtime_error);
  {
    H5TableWriter writer(Path("other.h5").string());
    writer.SetStringAttribute("/", "format", "something-else");
    writer.Close();
  }
  try {
    (void)ReadBenchTables(Path("other.h5"));
    ADD_FAILURE() << "read a file of another format";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("not a feather bench table file"), std::string::npos);
  }
}

TEST(CurrentCommandLineTest, NamesThisExecutable) {
  EXPECT_NE(CurrentCommandLine().find("bench_table_test"), std::string::npos);
}

TEST(BenchColumnKindNameTest, Names) {
  EXPECT_EQ(BenchColumnKindName(BenchColumnKind::kFloat64), "float64");
  EXPECT_EQ(BenchColumnKindName(BenchColumnKind::kInt64), "int64");
  EXPECT_EQ(BenchColumnKindName(BenchColumnKind::kLabel), "label");
}

}  // namespace
}  // namespace feather::hw
