// layering_test.cc: the folders' dependency rules, checked on the sources. Each library folder's
// README says what it may depend on; this test holds the code to it, so a forbidden include
// fails the build's test run instead of growing unnoticed (issue 14). A rule names the top-level
// folders whose headers a folder's files may include; "" lines (system and third-party headers,
// <...>) are not checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace feather {
namespace {

namespace fs = std::filesystem;

// unit -> the units it may include from (itself always allowed). A unit is a top-level folder,
// or for sim/ one of its sub-libraries ("sim/engine"): the CMake targets of sim/CMakeLists.txt.
const std::map<std::string, std::set<std::string>>& Rules() {
  static const std::map<std::string, std::set<std::string>> rules = {
      {"base", {}},
      {"cht", {"base"}},
      {"policies", {"base", "cht"}},
      {"sim/engine", {"base"}},
      {"sim/kv", {"base"}},
      {"sim/workload", {"base", "cht", "policies"}},
      {"sim/serving", {"base", "cht", "policies", "sim/engine", "sim/kv", "sim/workload"}},
      {"sim/io",
       {"base", "cht", "policies", "sim/engine", "sim/kv", "sim/workload", "sim/serving"}},
      {"hw", {"base", "sim/engine"}},
      {"calib", {"base", "sim/engine", "sim/io", "hw"}},
      {"cli",
       {"base", "cht", "policies", "sim/engine", "sim/kv", "sim/workload", "sim/serving", "sim/io",
        "hw", "calib"}},
      {"python",
       {"base", "cht", "policies", "sim/engine", "sim/kv", "sim/workload", "sim/serving", "sim/io",
        "cli"}},
  };
  return rules;
}

// The unit a repository path belongs to: "sim/kv/kv_cache.h" -> "sim/kv", "hw/gemm.h" -> "hw";
// "" for a path outside every unit (a third-party header, a file directly in sim/).
std::string UnitOf(const std::string& path) {
  const size_t first = path.find('/');
  if (first == std::string::npos) return "";
  std::string unit = path.substr(0, first);
  if (unit == "sim") {
    const size_t second = path.find('/', first + 1);
    if (second == std::string::npos) return "";
    unit = path.substr(0, second);
  }
  return Rules().count(unit) > 0 ? unit : "";
}

struct Violation {
  std::string file;
  int line = 0;
  std::string include;
};

std::vector<Violation> Violations(const fs::path& root) {
  const std::regex include_line(R"re(^\s*#\s*include\s*"([^"]*)")re");
  std::vector<Violation> found;
  for (const char* top : {"base", "cht", "policies", "sim", "hw", "calib", "cli", "python"}) {
    const fs::path dir = root / top;
    if (!fs::is_directory(dir)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(dir)) {
      const std::string ext = entry.path().extension().string();
      if (ext != ".h" && ext != ".cc" && ext != ".cu" && ext != ".cuh") continue;
      const std::string file = fs::relative(entry.path(), root).string();
      const std::string unit = UnitOf(file);
      std::ifstream in(entry.path());
      std::string text;
      int number = 0;
      while (std::getline(in, text)) {
        ++number;
        std::smatch match;
        if (!std::regex_search(text, match, include_line)) continue;
        const std::string target = UnitOf(match[1]);
        const bool allowed = target.empty() || target == unit ||
                             (!unit.empty() && Rules().at(unit).count(target) > 0);
        // A file directly in sim/ (unit "") may include nothing of the project but base/.
        if (allowed && !(unit.empty() && !target.empty() && target != "base")) continue;
        found.push_back({file, number, text});
      }
    }
  }
  return found;
}

TEST(Layering, EveryIncludeFollowsTheFolderRules) {
  const std::vector<Violation> violations = Violations(FEATHER_SOURCE_DIR);
  for (const Violation& v : violations) {
    ADD_FAILURE() << v.file << ":" << v.line << ": " << v.include
                  << " crosses the layering (rules in tests/base/layering_test.cc and each "
                     "folder's README)";
  }
}

// The check can fail: a folder that includes upwards is caught.
TEST(Layering, AnUpwardIncludeIsCaught) {
  const fs::path root = fs::path(::testing::TempDir()) / "feather_layering";
  fs::remove_all(root);
  fs::create_directories(root / "base");
  fs::create_directories(root / "sim");
  std::ofstream(root / "base" / "bad.h") << "#pragma once\n#include \"sim/engine/engine.h\"\n";
  fs::create_directories(root / "sim" / "engine");
  fs::create_directories(root / "hw");
  std::ofstream(root / "sim" / "engine" / "fine.h")
      << "#include \"base/check.h\"\n#include <vector>\n";
  // sim/engine may not reach the I/O edge, and hw may not reach the serving loop.
  std::ofstream(root / "sim" / "engine" / "bad.cc") << "#include \"sim/io/scenario.h\"\n";
  std::ofstream(root / "hw" / "bad.cc") << "\n\n#include \"sim/serving/simulator.h\"\n";
  std::ofstream(root / "hw" / "fine.cc") << "#include \"sim/engine/engine.h\"\n";
  std::vector<Violation> violations = Violations(root);
  std::sort(violations.begin(), violations.end(),
            [](const Violation& a, const Violation& b) { return a.file < b.file; });
  ASSERT_EQ(violations.size(), 3u);
  EXPECT_EQ(violations[0].file, "base/bad.h");
  EXPECT_EQ(violations[0].line, 2);
  EXPECT_EQ(violations[1].file, "hw/bad.cc");
  EXPECT_EQ(violations[1].line, 3);
  EXPECT_EQ(violations[2].file, "sim/engine/bad.cc");
  fs::remove_all(root);
}

}  // namespace
}  // namespace feather
