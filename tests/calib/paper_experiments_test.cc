// paper_experiments_test.cc: the §3 experiment batches (calib/paper_experiments.h) have the
// sharing each experiment claims, inside the pool, the same on every call.
#include "calib/paper_experiments.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace feather::calib {
namespace {

constexpr uint64_t kPool = 1 << 16;

std::vector<const ExperimentPoint*> Of(const std::vector<ExperimentPoint>& points,
                                       const std::string& experiment) {
  std::vector<const ExperimentPoint*> out;
  for (const ExperimentPoint& p : points) {
    if (p.experiment == experiment) out.push_back(&p);
  }
  return out;
}

TEST(PaperExperiments, EveryExperimentIsThereAndDeterministic) {
  const std::vector<ExperimentPoint> a = PaperExperiments(true, kPool);
  const std::vector<ExperimentPoint> b = PaperExperiments(true, kPool);
  ASSERT_EQ(a.size(), b.size());
  for (const char* e : {"exp1", "exp2", "exp3", "exp4", "exp5", "exp6"}) {
    EXPECT_FALSE(Of(a, e).empty()) << e;
  }
  EXPECT_GT(PaperExperiments(false, kPool).size(), a.size());  // quick keeps fewer points
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].batch.tables, b[i].batch.tables) << a[i].experiment << " " << a[i].variant;
    EXPECT_LE(a[i].batch.blocks_used, kPool);
    for (const std::vector<uint32_t>& table : a[i].batch.tables) {
      for (const uint32_t block : table) EXPECT_LT(block, kPool);
    }
    for (const StepRequest& r : a[i].batch.plan.requests) {
      EXPECT_FALSE(r.is_prefill);
      EXPECT_EQ(r.new_tokens, 1u);
    }
  }
}

// Exp 3's point with N groups holds exactly N distinct first blocks (the shared prefixes), and
// Exp 1's f = 64/64 point one.
TEST(PaperExperiments, GroupsShareTheirPrefixBlocks) {
  const std::vector<ExperimentPoint> points = PaperExperiments(true, kPool);
  for (const ExperimentPoint* p : Of(points, "exp3")) {
    std::set<uint32_t> first_blocks;
    for (const std::vector<uint32_t>& table : p->batch.tables) first_blocks.insert(table.front());
    EXPECT_EQ(first_blocks.size(), static_cast<size_t>(p->x)) << p->variant;
    EXPECT_EQ(p->batch.tables.size(), 100u);
  }
  const std::vector<const ExperimentPoint*> exp1 = Of(points, "exp1");
  ASSERT_FALSE(exp1.empty());
  std::set<uint32_t> first_blocks;
  for (const std::vector<uint32_t>& table : exp1.front()->batch.tables) {
    first_blocks.insert(table.front());
  }
  EXPECT_EQ(exp1.front()->x, 1.0);
  EXPECT_EQ(first_blocks.size(), 1u);
}

}  // namespace
}  // namespace feather::calib
