// layering_test.cc: the folders' dependency rules, checked on the sources. Each library folder's
// README says what it may depend on; this test holds the code to it, so a forbidden include
// fails the build's test run instead of growing unnoticed (issue 14). A rule names the top-level
// folders whose headers a folder's files may include; "" lines (system and third-party headers,
// <...>) are not checked.
#include <gtest/gtest.h>

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

// folder -> the folders it may include from (itself always allowed).
const std::map<std::string, std::set<std::string>>& Rules() {
  static const std::map<std::string, std::set<std::string>> rules = {
      {"base", {}},
      {"cht", {"base"}},
      {"policies", {"base", "cht"}},
      {"sim", {"base", "cht", "policies"}},
      {"hw", {"base", "cht", "sim"}},
      {"calib", {"base", "sim"}},
      {"cli", {"base", "cht", "policies", "sim", "hw", "calib"}},
      {"python", {"base", "cht", "policies", "sim", "cli"}},
  };
  return rules;
}

struct Violation {
  std::string file;
  int line = 0;
  std::string include;
};

std::vector<Violation> Violations(const fs::path& root) {
  const std::regex include_line(R"(^\s*#\s*include\s*"([A-Za-z0-9_]+)/[^"]*")");
  std::vector<Violation> found;
  for (const auto& [folder, allowed] : Rules()) {
    const fs::path dir = root / folder;
    if (!fs::is_directory(dir)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(dir)) {
      const std::string ext = entry.path().extension().string();
      if (ext != ".h" && ext != ".cc" && ext != ".cu" && ext != ".cuh") continue;
      std::ifstream in(entry.path());
      std::string text;
      int number = 0;
      while (std::getline(in, text)) {
        ++number;
        std::smatch match;
        if (!std::regex_search(text, match, include_line)) continue;
        const std::string target = match[1];
        if (target == folder || allowed.count(target) > 0 || Rules().count(target) == 0) continue;
        found.push_back({fs::relative(entry.path(), root).string(), number, text});
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
  std::ofstream(root / "base" / "bad.h") << "#pragma once\n#include \"sim/engine.h\"\n";
  std::ofstream(root / "sim" / "fine.h") << "#include \"base/check.h\"\n#include <vector>\n";
  const std::vector<Violation> violations = Violations(root);
  ASSERT_EQ(violations.size(), 1u);
  EXPECT_EQ(violations[0].file, "base/bad.h");
  EXPECT_EQ(violations[0].line, 2);
  fs::remove_all(root);
}

}  // namespace
}  // namespace feather
