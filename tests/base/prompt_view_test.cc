// prompt_view_test.cc: TwoPieceView::ForEachChunkRun (base/prompt_view.h) against a brute-force
// reference over random views: the callbacks, concatenated, give exactly chunks [first, last)
// in order; every run lies inside one piece and holds whole chunks (but the view's last); a seam
// call is the one chunk that crosses from head to tail.
#include "base/prompt_view.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "base/splitmix64.h"

namespace feather {
namespace {

TEST(TwoPieceView, ForEachChunkRunCoversTheChunksInOrderOverRandomViews) {
  SplitMix64 rng{20261125};
  for (int trial = 0; trial < 20000; ++trial) {
    const auto head_size = static_cast<size_t>(rng.Next() % 40);
    const auto tail_size = static_cast<size_t>(rng.Next() % 40);
    const auto chunk = static_cast<uint32_t>(1 + rng.Next() % 9);
    std::vector<Token> all(head_size + tail_size);
    std::iota(all.begin(), all.end(), Token{1});
    const std::span<const Token> whole(all);
    const PromptView view(whole.first(head_size), whole.subspan(head_size));
    const auto chunks = static_cast<uint32_t>((all.size() + chunk - 1) / chunk);
    const auto first = static_cast<uint32_t>(rng.Next() % (chunks + 1));
    const auto last = static_cast<uint32_t>(first + rng.Next() % (chunks - first + 1));
    SCOPED_TRACE("head " + std::to_string(head_size) + " tail " + std::to_string(tail_size) +
                 " chunk " + std::to_string(chunk) + " [" + std::to_string(first) + ", " +
                 std::to_string(last) + ")");

    std::vector<Token> seen;
    uint32_t seen_chunks = 0;
    int seams = 0;
    const std::span<const Token> head = view.head(), tail = view.tail();
    const auto inside = [](std::span<const Token> part, std::span<const Token> piece) {
      return part.empty() || (part.data() >= piece.data() &&
                              part.data() + part.size() <= piece.data() + piece.size());
    };
    view.ForEachChunkRun(
        chunk, first, last,
        [&](std::span<const Token> run, uint32_t n) {
          ASSERT_GT(n, 0u);
          EXPECT_TRUE(inside(run, head) || inside(run, tail));
          // Whole chunks, but for the view's short last one.
          EXPECT_EQ((run.size() + chunk - 1) / chunk, n);
          seen.insert(seen.end(), run.begin(), run.end());
          seen_chunks += n;
        },
        [&](PromptView seam) {
          ++seams;
          EXPECT_FALSE(seam.contiguous());  // it crosses head to tail
          const std::vector<Token> tokens = seam.ToVector();
          seen.insert(seen.end(), tokens.begin(), tokens.end());
          ++seen_chunks;
        });
    const size_t begin = size_t{first} * chunk;
    const size_t end = std::min(all.size(), size_t{last} * chunk);
    const std::vector<Token> want(all.begin() + static_cast<std::ptrdiff_t>(begin),
                                  all.begin() + static_cast<std::ptrdiff_t>(std::max(begin, end)));
    ASSERT_EQ(seen, want);
    EXPECT_EQ(seen_chunks, last - first);
    // Brute force: a chunk in range crosses the seam when it starts before the head's end and
    // ends after it.
    int want_seams = 0;
    for (uint32_t c = first; c < last; ++c) {
      const size_t b = size_t{c} * chunk;
      const size_t e = std::min(all.size(), b + chunk);
      if (!view.contiguous() && b < view.head().size() && e > view.head().size()) ++want_seams;
    }
    EXPECT_EQ(seams, want_seams);
  }
}

}  // namespace
}  // namespace feather
