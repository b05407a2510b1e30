// selector_conformance_test.cc: every selector honours the CandidateSelector contract.
//
// Random event sequences (arrivals, rounds of proposals and admissions, finishes, preemptions,
// cancellations) over radix-shaped prompts, checked against a plain model of the waiting and
// running sets: a proposal is always a waiting request, Next() is idempotent until Admit(),
// NumWaiting() matches, and a round only ends early when nothing waits (or, for round-ranked
// selectors, when the round's order is exhausted, after which a new round proposes again). A
// selector that takes Skip() never proposes the skipped request again in that round, still
// counts it as waiting, and proposes it again in later rounds; one that refuses changes nothing.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "policies/selector_factory.h"
#include "base/rng.h"
#include "sim/workload/synthetic_prompts.h"

namespace feather {
namespace {

class SelectorConformance : public ::testing::TestWithParam<std::string_view> {};

TEST_P(SelectorConformance, RandomEventSequencesKeepTheContract) {
  const std::string name(GetParam());
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    RadixShape shape;
    shape.levels = 2;
    shape.branching = 3;
    shape.tokens_per_level = 40;
    shape.unique_suffix_tokens = 8;
    const PromptSet prompts = MakeRadixPrompts(shape, 200, seed);
    SelectorOptions options;
    options.chunk_tokens = 16;
    options.expected_requests = 200;
    auto selector = MakeSelector(name, options);
    EXPECT_EQ(selector->Name(), name);
    Rng rng(seed);
    std::set<RequestId> waiting, running;
    RequestId next = 0;
    for (int step = 0; step < 300; ++step) {
      const uint64_t op = rng.Uniform(10);
      if (op < 4 && next < prompts.size()) {
        selector->OnArrival(RequestInfo{next, prompts.Prompt(next), prompts.group[next]});
        waiting.insert(next++);
      } else if (op < 7) {
        selector->BeginRound();
        std::set<RequestId> skipped;
        const auto limit = rng.Uniform(6);
        for (uint64_t k = 0; k < limit; ++k) {
          const auto c = selector->Next();
          if (!c) {
            ASSERT_TRUE(waiting.size() == skipped.size() || k > 0)
                << name << ": no proposal at round start";
            break;
          }
          ASSERT_TRUE(waiting.contains(c->id)) << name << " proposed " << c->id;
          ASSERT_FALSE(skipped.contains(c->id)) << name << " proposed a skipped " << c->id;
          const auto again = selector->Next();
          ASSERT_TRUE(again && again->id == c->id) << name << ": Next() not idempotent";
          if (rng.Uniform(3) == 0) {
            if (selector->Skip(c->id)) {
              skipped.insert(c->id);
              ASSERT_EQ(selector->NumWaiting(), waiting.size()) << name << ": skipped not waiting";
              continue;
            }
            const auto same = selector->Next();  // a refused skip changes nothing
            ASSERT_TRUE(same && same->id == c->id) << name << ": a refused Skip() changed Next()";
          }
          selector->Admit(c->id);
          waiting.erase(c->id);
          running.insert(c->id);
        }
      } else if (op < 8 && !running.empty()) {
        const RequestId id = *std::next(running.begin(), rng.Uniform(running.size()));
        selector->OnFinish(id);
        running.erase(id);
      } else if (op < 9 && !running.empty()) {
        const RequestId id = *std::next(running.begin(), rng.Uniform(running.size()));
        selector->OnPreempt(id);
        running.erase(id);
        waiting.insert(id);
      } else if (!waiting.empty()) {
        const RequestId id = *std::next(waiting.begin(), rng.Uniform(waiting.size()));
        selector->OnCancel(id);
        waiting.erase(id);
      }
      ASSERT_EQ(selector->NumWaiting(), waiting.size()) << name << " step " << step;
    }
    // Draining: repeated rounds admit every waiting request exactly once.
    while (!waiting.empty()) {
      selector->BeginRound();
      const auto c = selector->Next();
      ASSERT_TRUE(c.has_value()) << name << ": requests wait but a fresh round proposes none";
      ASSERT_TRUE(waiting.contains(c->id));
      selector->Admit(c->id);
      waiting.erase(c->id);
    }
    EXPECT_FALSE(selector->Next().has_value());
    EXPECT_GT(selector->MemoryBytes(), 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(AllSelectors, SelectorConformance,
                         ::testing::ValuesIn(SelectorNames().begin(), SelectorNames().end()),
                         [](const auto& param_info) {
                           std::string n(param_info.param);
                           for (char& ch : n) ch = ch == '-' ? '_' : ch;
                           return n;
                         });

TEST(SelectorFactory, UnknownNameListsTheValidOnes) {
  try {
    (void)MakeSelector("lifo");
    FAIL() << "expected an exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("lifo"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("dfs-weight"), std::string::npos);
  }
}

}  // namespace
}  // namespace feather
