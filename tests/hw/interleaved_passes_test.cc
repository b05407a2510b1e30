// interleaved_passes_test.cc: the pass order of RunInterleavedPasses (warm-up dropped,
// directions alternating), and MedianByTotal / RelativeSpread against hand-computed values.
#include "hw/interleaved_passes.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace feather::hw {
namespace {

StepTiming Total(int64_t ns) {
  StepTiming t;
  t.total_ns = ns;
  return t;
}

TEST(InterleavedPasses, WarmsUpThenAlternatesDirection) {
  std::vector<std::pair<size_t, int>> calls;
  std::vector<int> passes_done;
  const auto timings = RunInterleavedPasses(
      3, 3,
      [&](size_t step, int pass) {
        calls.emplace_back(step, pass);
        return Total(static_cast<int64_t>(100 * pass + step));
      },
      [&](int pass) { passes_done.push_back(pass); });
  const std::vector<std::pair<size_t, int>> expected = {
      {0, 0}, {1, 0}, {2, 0},   // warm-up, forward
      {2, 1}, {1, 1}, {0, 1},   // backward
      {0, 2}, {1, 2}, {2, 2},   // forward
      {2, 3}, {1, 3}, {0, 3}};  // backward
  EXPECT_EQ(calls, expected);
  EXPECT_EQ(passes_done, (std::vector<int>{0, 1, 2, 3}));
  ASSERT_EQ(timings.size(), 3u);
  for (size_t step = 0; step < 3; ++step) {
    ASSERT_EQ(timings[step].size(), 3u);  // the warm-up's timing is dropped
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(timings[step][static_cast<size_t>(r)].total_ns,
                static_cast<int64_t>(100 * (r + 1) + static_cast<int>(step)));
    }
  }
}

TEST(InterleavedPasses, MedianKeepsTheWholeTiming) {
  std::vector<StepTiming> timings = {Total(30), Total(10), Total(20)};
  timings[2].term_ns[0] = 7;  // the median's terms come with it
  const StepTiming median = MedianByTotal(timings);
  EXPECT_EQ(median.total_ns, 20);
  EXPECT_EQ(median.term_ns[0], 7);
  // Even count: the upper median.
  EXPECT_EQ(MedianByTotal({Total(4), Total(1), Total(3), Total(2)}).total_ns, 3);
}

TEST(InterleavedPasses, SpreadIsRangeOverMedian) {
  EXPECT_DOUBLE_EQ(RelativeSpread({Total(90), Total(100), Total(120)}), 30.0 / 100.0);
  EXPECT_DOUBLE_EQ(RelativeSpread({Total(50)}), 0.0);
  EXPECT_DOUBLE_EQ(RelativeSpread({}), 0.0);
}

}  // namespace
}  // namespace feather::hw
