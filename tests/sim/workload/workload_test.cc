// workload_test.cc: the workload generator produces exactly the sharing structure, arrival
// process and length distribution its spec claims, deterministically; trace replay turns block
// ids into tokens that share exactly what the trace says; bad specs and traces are rejected.
#include "sim/workload/workload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "policies/selector.h"
#include "base/input_error.h"
#include "base/rng.h"

namespace feather {
namespace {

const std::string kFixture = std::string(FEATHER_SOURCE_DIR) + "/tests/sim/data/small_trace.jsonl";
const std::string kRealTrace =
    std::string(FEATHER_SOURCE_DIR) + "/../shared/traces/conversation_trace.jsonl";

size_t Lcp(PromptView a, PromptView b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

LengthSpec Fixed(uint32_t tokens) {
  LengthSpec s;
  s.kind = LengthKind::kFixed;
  s.value = tokens;
  return s;
}

LengthSpec Uniform(uint32_t min, uint32_t max) {
  LengthSpec s;
  s.kind = LengthKind::kUniform;
  s.min = min;
  s.max = max;
  return s;
}

WorkloadSpec SmallGroups() {
  WorkloadSpec spec;
  spec.requests = 300;
  spec.sharing.kind = SharingKind::kGroups;
  spec.sharing.groups = 4;
  spec.sharing.prefix_tokens = 50;
  spec.prompt_tokens = Uniform(5, 20);
  spec.output_tokens = Uniform(1, 300);
  return spec;
}

void ExpectWellFormed(const Workload& w, uint64_t n) {
  ASSERT_EQ(w.size(), n);
  ASSERT_EQ(w.output_tokens.size(), n);
  ASSERT_EQ(w.prompts.size(), n);
  ASSERT_EQ(CopyEachPrompt(w.prompts).offsets.size(), n + 1);
  EXPECT_EQ(CopyEachPrompt(w.prompts).offsets.back(), CopyEachPrompt(w.prompts).tokens.size());
  EXPECT_TRUE(std::is_sorted(w.arrival_ns.begin(), w.arrival_ns.end()));
  for (uint64_t i = 0; i < n; ++i) {
    EXPECT_GE(w.output_tokens[i], 1u);
    EXPECT_GE(w.prompts.Prompt(i).size(), 1u);
  }
  for (const Token t : CopyEachPrompt(w.prompts).tokens) ASSERT_GE(t, 1);
}

void ExpectIdentical(const Workload& a, const Workload& b) {
  EXPECT_EQ(a.arrival_ns, b.arrival_ns);
  EXPECT_EQ(a.output_tokens, b.output_tokens);
  EXPECT_EQ(CopyEachPrompt(a.prompts).tokens, CopyEachPrompt(b.prompts).tokens);
  EXPECT_EQ(CopyEachPrompt(a.prompts).offsets, CopyEachPrompt(b.prompts).offsets);
  EXPECT_EQ(a.prompts.group, b.prompts.group);
}

std::vector<WorkloadSpec> EverySharingKind() {
  std::vector<WorkloadSpec> specs;
  for (const SharingKind kind :
       {SharingKind::kGroups, SharingKind::kRadix, SharingKind::kFractional,
        SharingKind::kTwoPrefixes, SharingKind::kNone}) {
    WorkloadSpec spec = SmallGroups();
    spec.sharing.kind = kind;
    spec.sharing.levels = 3;
    spec.sharing.branching = 3;
    spec.sharing.level_tokens = 10;
    specs.push_back(spec);
  }
  return specs;
}

TEST(WorkloadTest, SameSpecAndSeedGiveIdenticalWorkloads) {
  for (const WorkloadSpec& spec : EverySharingKind()) {
    const Workload a = GenerateWorkload(spec, 42);
    const Workload b = GenerateWorkload(spec, 42);
    ExpectWellFormed(a, spec.requests);
    ExpectIdentical(a, b);
  }
}

TEST(WorkloadTest, DifferentSeedsGiveDifferentWorkloads) {
  for (const WorkloadSpec& spec : EverySharingKind()) {
    const Workload a = GenerateWorkload(spec, 1);
    const Workload b = GenerateWorkload(spec, 2);
    EXPECT_NE(a.arrival_ns, b.arrival_ns);
    EXPECT_NE(a.output_tokens, b.output_tokens);
    EXPECT_NE(CopyEachPrompt(a.prompts).tokens, CopyEachPrompt(b.prompts).tokens);
  }
}

TEST(WorkloadTest, StreamsAreIndependent) {
  // Changing the rate moves the arrivals only: prompts and output lengths stay bit-identical.
  WorkloadSpec spec = SmallGroups();
  const Workload a = GenerateWorkload(spec, 7);
  spec.arrival.rate_per_s = 3;
  const Workload b = GenerateWorkload(spec, 7);
  EXPECT_NE(a.arrival_ns, b.arrival_ns);
  EXPECT_EQ(a.output_tokens, b.output_tokens);
  EXPECT_EQ(CopyEachPrompt(a.prompts).tokens, CopyEachPrompt(b.prompts).tokens);
  EXPECT_EQ(a.prompts.group, b.prompts.group);
}

TEST(WorkloadTest, GroupsShareExactlyTheirPrefix) {
  const WorkloadSpec spec = SmallGroups();
  const Workload w = GenerateWorkload(spec, 3);
  ExpectWellFormed(w, spec.requests);
  const PromptSet p = CopyEachPrompt(w.prompts);
  std::vector<int> seen(spec.sharing.groups, 0);
  for (size_t i = 0; i < p.size(); ++i) {
    ASSERT_LT(p.group[i], spec.sharing.groups);
    ++seen[p.group[i]];
    EXPECT_GE(p.Prompt(i).size(), 50u + 5u);
    EXPECT_LE(p.Prompt(i).size(), 50u + 20u);
    for (size_t j = 0; j < i; ++j) {
      const size_t expected = p.group[i] == p.group[j] ? 50 : 0;
      ASSERT_EQ(Lcp(p.Prompt(i), p.Prompt(j)), expected) << i << " vs " << j;
    }
  }
  for (const int count : seen) EXPECT_GT(count, 40);  // uniform: 75 expected per group
}

TEST(WorkloadTest, ZipfGroupSizesAreSkewed) {
  WorkloadSpec spec;
  spec.requests = 20000;
  spec.sharing.groups = 5;
  spec.sharing.prefix_tokens = 2;
  spec.sharing.group_sizes = GroupSizes::kZipf;
  spec.sharing.zipf_exponent = 1.0;
  spec.prompt_tokens = Fixed(1);
  const Workload w = GenerateWorkload(spec, 11);
  std::vector<double> count(5, 0);
  for (const uint32_t g : w.prompts.group) count[g] += 1;
  // P(g) = (1/(g+1)) / H_5, H_5 = 137/60.
  for (int g = 0; g < 5; ++g) {
    const double expected = 20000.0 / (g + 1) / (137.0 / 60.0);
    EXPECT_NEAR(count[g], expected, 5 * std::sqrt(expected)) << g;
    if (g > 0) {
      EXPECT_LT(count[g], count[g - 1]);
    }
  }
}

TEST(WorkloadTest, ExactGroupSizesGiveEveryGroupItsShareInRandomOrder) {
  for (const uint64_t seed : {1, 2, 3}) {
    WorkloadSpec spec;
    spec.requests = 803;  // 8 groups: three of 101, five of 100
    spec.sharing.groups = 8;
    spec.sharing.prefix_tokens = 2;
    spec.sharing.group_sizes = GroupSizes::kExact;
    spec.prompt_tokens = Fixed(1);
    const Workload w = GenerateWorkload(spec, seed);
    std::vector<int> count(8, 0);
    size_t round_robin = 0;  // requests whose group is the one a plain i % 8 would give
    for (size_t i = 0; i < w.prompts.group.size(); ++i) {
      ++count[w.prompts.group[i]];
      round_robin += w.prompts.group[i] == i % 8 ? 1 : 0;
    }
    for (int g = 0; g < 8; ++g) EXPECT_EQ(count[g], g < 3 ? 101 : 100) << g;
    EXPECT_LT(round_robin, 200u);  // shuffled: ~1/8 of 803 by chance
    EXPECT_EQ(GenerateWorkload(spec, seed).prompts.group, w.prompts.group);  // same seed, same
  }
}

TEST(WorkloadTest, RadixCommonPrefixIsTheCommonTreePath) {
  WorkloadSpec spec;
  spec.requests = 250;
  spec.sharing.kind = SharingKind::kRadix;
  spec.sharing.levels = 3;
  spec.sharing.branching = 3;
  spec.sharing.level_tokens = 7;
  spec.prompt_tokens = Fixed(5);
  const Workload w = GenerateWorkload(spec, 5);
  ExpectWellFormed(w, spec.requests);
  const PromptSet p = CopyEachPrompt(w.prompts);
  std::vector<bool> leaf_seen(27, false);
  for (size_t i = 0; i < p.size(); ++i) {
    ASSERT_LT(p.group[i], 27u);
    leaf_seen[p.group[i]] = true;
    ASSERT_EQ(p.Prompt(i).size(), 3u * 7u + 5u);
    for (size_t j = 0; j < i; ++j) {
      // Leaf index digits in base 3, most significant first, are the path.
      size_t common_levels = 0;
      for (uint32_t div : {9u, 3u, 1u}) {
        if (p.group[i] / div != p.group[j] / div) break;
        ++common_levels;
      }
      ASSERT_EQ(Lcp(p.Prompt(i), p.Prompt(j)), common_levels * 7) << i << " vs " << j;
    }
  }
  EXPECT_EQ(std::count(leaf_seen.begin(), leaf_seen.end(), true), 27);
}

TEST(WorkloadTest, RadixWithManyLevels) {
  WorkloadSpec spec;
  spec.requests = 100;
  spec.sharing.kind = SharingKind::kRadix;
  spec.sharing.levels = 8;
  spec.sharing.branching = 10;  // 10^8 leaves: nodes are looked up lazily, never materialized
  spec.sharing.level_tokens = 3;
  spec.prompt_tokens = Fixed(2);
  const Workload w = GenerateWorkload(spec, 5);
  ExpectWellFormed(w, spec.requests);
  for (size_t i = 1; i < w.size(); ++i) {
    // First-level node = leaf / 10^7.
    const bool same_root_child = w.prompts.group[i] / 10000000 == w.prompts.group[0] / 10000000;
    EXPECT_EQ(Lcp(w.prompts.Prompt(i), w.prompts.Prompt(0)) >= 3, same_root_child) << i;
  }
}

TEST(WorkloadTest, FractionalSharingCoversTheFractionOfEachPrompt) {
  WorkloadSpec spec;
  spec.requests = 200;
  spec.sharing.kind = SharingKind::kFractional;
  spec.sharing.shared_fraction = 0.3;
  spec.prompt_tokens = Uniform(10, 60);
  const Workload w = GenerateWorkload(spec, 9);
  ExpectWellFormed(w, spec.requests);
  const PromptSet p = CopyEachPrompt(w.prompts);
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(p.group[i], 0u);
    const size_t shared_i =
        static_cast<size_t>(std::llround(0.3 * static_cast<double>(p.Prompt(i).size())));
    for (size_t j = 0; j < i; ++j) {
      const size_t shared_j =
          static_cast<size_t>(std::llround(0.3 * static_cast<double>(p.Prompt(j).size())));
      ASSERT_EQ(Lcp(p.Prompt(i), p.Prompt(j)), std::min(shared_i, shared_j)) << i << " vs " << j;
    }
  }
}

TEST(WorkloadTest, FractionalSharingExtremes) {
  WorkloadSpec spec;
  spec.requests = 20;
  spec.sharing.kind = SharingKind::kFractional;
  spec.prompt_tokens = Fixed(40);
  spec.sharing.shared_fraction = 1.0;
  const Workload all = GenerateWorkload(spec, 1);
  for (size_t i = 1; i < all.size(); ++i)
    EXPECT_EQ(Lcp(all.prompts.Prompt(i), all.prompts.Prompt(0)), 40u);
  spec.sharing.shared_fraction = 0.0;
  const Workload none = GenerateWorkload(spec, 1);
  for (size_t i = 1; i < none.size(); ++i)
    EXPECT_EQ(Lcp(none.prompts.Prompt(i), none.prompts.Prompt(0)), 0u);
}

TEST(WorkloadTest, TwoPrefixesMixedWithFraction) {
  WorkloadSpec spec;
  spec.requests = 4000;
  spec.sharing.kind = SharingKind::kTwoPrefixes;
  spec.sharing.shared_fraction = 0.3;
  spec.sharing.prefix_tokens = 30;
  spec.prompt_tokens = Fixed(4);
  const Workload w = GenerateWorkload(spec, 13);
  ExpectWellFormed(w, spec.requests);
  const PromptSet p = CopyEachPrompt(w.prompts);
  double a_count = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    ASSERT_LE(p.group[i], 1u);
    a_count += p.group[i] == 0 ? 1 : 0;
    ASSERT_EQ(p.Prompt(i).size(), 34u);
    if (i < 200) {
      for (size_t j = 0; j < i; ++j) {
        ASSERT_EQ(Lcp(p.Prompt(i), p.Prompt(j)), p.group[i] == p.group[j] ? 30u : 0u);
      }
    }
  }
  // Binomial(4000, 0.3): sd = 29.
  EXPECT_NEAR(a_count, 1200, 150);
}

TEST(WorkloadTest, NoSharingGivesUniquePromptsWithoutGroups) {
  WorkloadSpec spec;
  spec.requests = 300;
  spec.sharing.kind = SharingKind::kNone;
  spec.prompt_tokens = Uniform(3, 9);
  const Workload w = GenerateWorkload(spec, 17);
  ExpectWellFormed(w, spec.requests);
  for (size_t i = 0; i < w.size(); ++i) {
    EXPECT_EQ(w.prompts.group[i], kNoPrefixGroup);
    EXPECT_GE(w.prompts.Prompt(i).size(), 3u);
    EXPECT_LE(w.prompts.Prompt(i).size(), 9u);
    for (size_t j = 0; j < i; ++j) ASSERT_EQ(Lcp(w.prompts.Prompt(i), w.prompts.Prompt(j)), 0u);
  }
}

TEST(WorkloadTest, PoissonArrivalsHaveTheRequestedRate) {
  WorkloadSpec spec;
  spec.requests = 100000;
  spec.arrival.rate_per_s = 250;
  spec.sharing.kind = SharingKind::kNone;
  spec.prompt_tokens = Fixed(1);
  spec.output_tokens = Fixed(1);
  const Workload w = GenerateWorkload(spec, 21);
  ExpectWellFormed(w, spec.requests);
  // Mean gap 4 ms; its standard error over 1e5 gaps is 0.3 %, so 1.5 % is 5 sigma.
  const double mean_gap_s = static_cast<double>(w.arrival_ns.back()) * 1e-9 / 1e5;
  EXPECT_NEAR(mean_gap_s, 1.0 / 250, 0.015 / 250);
  // Exponential gaps: the standard deviation equals the mean.
  double sum_sq = 0;
  int64_t previous = 0;
  for (const int64_t t : w.arrival_ns) {
    const double gap_s = static_cast<double>(t - previous) * 1e-9;
    sum_sq += (gap_s - mean_gap_s) * (gap_s - mean_gap_s);
    previous = t;
  }
  EXPECT_NEAR(std::sqrt(sum_sq / 1e5), mean_gap_s, 0.03 * mean_gap_s);
  EXPECT_GT(w.arrival_ns.front(), 0);  // the first arrival is a gap after time 0
}

TEST(WorkloadTest, PiecewiseRatesHoldPerPhase) {
  WorkloadSpec spec;
  spec.requests = 40000;
  spec.arrival.kind = ArrivalKind::kPiecewise;
  spec.arrival.phases = {{100, 50}, {0, 1000}, {100, 100}, {1, 200}};  // the empty phase is skipped
  spec.sharing.kind = SharingKind::kNone;
  spec.prompt_tokens = Fixed(1);
  const Workload w = GenerateWorkload(spec, 23);
  ExpectWellFormed(w, spec.requests);
  const auto count_before = [&](double t_s) {
    return static_cast<double>(
        std::lower_bound(w.arrival_ns.begin(), w.arrival_ns.end(), std::llround(t_s * 1e9)) -
        w.arrival_ns.begin());
  };
  // Poisson counts: 5000 +- 71 and 10000 +- 100 (5 sigma below).
  EXPECT_NEAR(count_before(100), 5000, 350);
  EXPECT_NEAR(count_before(200) - count_before(100), 10000, 500);
  // The last phase runs until every request arrived: 25000 more at 200/s take ~125 s.
  const double last_s = static_cast<double>(w.arrival_ns.back()) * 1e-9;
  const double rate = (40000.0 - count_before(200)) / (last_s - 200.0);
  EXPECT_NEAR(rate, 200, 200 * 0.04);
}

TEST(WorkloadTest, PiecewiseWithOnePhaseIsPoisson) {
  WorkloadSpec poisson;
  poisson.requests = 1000;
  poisson.arrival.rate_per_s = 37;
  poisson.sharing.kind = SharingKind::kNone;
  WorkloadSpec piecewise = poisson;
  piecewise.arrival.kind = ArrivalKind::kPiecewise;
  piecewise.arrival.phases = {{5, 37}};  // the last phase's duration is irrelevant
  EXPECT_EQ(GenerateWorkload(poisson, 3).arrival_ns, GenerateWorkload(piecewise, 3).arrival_ns);
}

TEST(WorkloadTest, OfflineArrivalsAreAllAtZero) {
  WorkloadSpec spec = SmallGroups();
  spec.arrival.kind = ArrivalKind::kOffline;
  const Workload w = GenerateWorkload(spec, 1);
  ExpectWellFormed(w, spec.requests);
  for (const int64_t t : w.arrival_ns) EXPECT_EQ(t, 0);
}

TEST(WorkloadTest, LengthKinds) {
  WorkloadSpec spec;
  spec.requests = 50000;
  spec.sharing.kind = SharingKind::kNone;
  spec.prompt_tokens = Fixed(3);
  spec.output_tokens = Uniform(10, 20);
  const Workload u = GenerateWorkload(spec, 1);
  EXPECT_EQ(*std::min_element(u.output_tokens.begin(), u.output_tokens.end()), 10u);
  EXPECT_EQ(*std::max_element(u.output_tokens.begin(), u.output_tokens.end()), 20u);
  for (size_t i = 0; i < u.size(); ++i) ASSERT_EQ(u.prompts.Prompt(i).size(), 3u);

  spec.output_tokens.kind = LengthKind::kLognormal;
  spec.output_tokens.mean = 200;
  spec.output_tokens.sigma = 0.5;
  spec.output_tokens.min = 1;
  spec.output_tokens.max = 1000000;
  const Workload ln = GenerateWorkload(spec, 1);
  double sum = 0;
  for (const uint32_t t : ln.output_tokens) sum += t;
  // sd of the lognormal = 200 * sqrt(e^0.25 - 1) = 107; standard error 0.48.
  EXPECT_NEAR(sum / 50000, 200, 3);
  const auto median = [](std::vector<uint32_t> v) {
    std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  // Median = exp(mu) = 200 * e^(-0.125) = 176.5.
  EXPECT_NEAR(median(ln.output_tokens), 176.5, 4);

  spec.output_tokens.min = 150;
  spec.output_tokens.max = 250;
  const Workload clamped = GenerateWorkload(spec, 1);
  EXPECT_EQ(*std::min_element(clamped.output_tokens.begin(), clamped.output_tokens.end()), 150u);
  EXPECT_EQ(*std::max_element(clamped.output_tokens.begin(), clamped.output_tokens.end()), 250u);
}

TEST(WorkloadTest, LognormalPromptLengthsAreClamped) {
  WorkloadSpec spec;
  spec.requests = 2000;
  spec.sharing.kind = SharingKind::kGroups;
  spec.sharing.groups = 2;
  spec.sharing.prefix_tokens = 10;
  spec.prompt_tokens.kind = LengthKind::kLognormal;
  spec.prompt_tokens.mean = 5;
  spec.prompt_tokens.sigma = 2;
  spec.prompt_tokens.min = 1;
  spec.prompt_tokens.max = 30;
  const Workload w = GenerateWorkload(spec, 4);
  ExpectWellFormed(w, spec.requests);
  size_t shortest = SIZE_MAX;
  size_t longest = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    shortest = std::min(shortest, w.prompts.Prompt(i).size());
    longest = std::max(longest, w.prompts.Prompt(i).size());
  }
  EXPECT_EQ(shortest, 11u);
  EXPECT_EQ(longest, 40u);
}

void ExpectInvalid(const WorkloadSpec& spec, const std::string& fragment) {
  try {
    (void)GenerateWorkload(spec, 1);
    ADD_FAILURE() << "no std::invalid_argument; expected one mentioning '" << fragment << "'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(WorkloadTest, RejectsInconsistentSpecs) {
  const WorkloadSpec good = SmallGroups();
  WorkloadSpec s = good;
  s.requests = 0;
  ExpectInvalid(s, "requests must be in [1,");
  s = good;
  s.arrival.rate_per_s = 0;
  ExpectInvalid(s, "arrival.rate_per_s must be a finite number > 0 (got 0)");
  s.arrival.rate_per_s = -2;
  ExpectInvalid(s, "(got -2)");
  s.arrival.rate_per_s = std::nan("");
  ExpectInvalid(s, "arrival.rate_per_s");
  s = good;
  s.arrival.kind = ArrivalKind::kPiecewise;
  ExpectInvalid(s, "arrival.phases must not be empty");
  s.arrival.phases = {{10, 5}, {10, 0}};
  ExpectInvalid(s, "arrival.phases[1].rate_per_s must be a finite number > 0");
  s.arrival.phases = {{-1, 5}, {10, 5}};
  ExpectInvalid(s, "arrival.phases[0].duration_s must be a finite number >= 0");
  s = good;
  s.sharing.groups = 0;
  ExpectInvalid(s, "sharing.groups must be >= 1");
  s = good;
  s.sharing.group_sizes = GroupSizes::kZipf;
  s.sharing.zipf_exponent = -1;
  ExpectInvalid(s, "sharing.zipf_exponent");
  s = good;
  s.sharing.kind = SharingKind::kRadix;
  s.sharing.levels = 0;
  ExpectInvalid(s, "sharing.levels must be in [1, 8] (got 0)");
  s.sharing.levels = 9;
  ExpectInvalid(s, "sharing.levels must be in [1, 8] (got 9)");
  s.sharing.levels = 8;
  s.sharing.branching = 0;
  ExpectInvalid(s, "sharing.branching must be >= 1");
  s.sharing.branching = 17;  // 17^8 > 2^32
  ExpectInvalid(s, "sharing.branching^levels must be < 2^32");
  s = good;
  s.sharing.kind = SharingKind::kFractional;
  s.sharing.shared_fraction = 1.5;
  ExpectInvalid(s, "sharing.shared_fraction must be in [0, 1] (got 1.5)");
  s.sharing.kind = SharingKind::kTwoPrefixes;
  s.sharing.shared_fraction = -0.1;
  ExpectInvalid(s, "sharing.shared_fraction");
  s = good;
  s.prompt_tokens = Uniform(10, 5);
  ExpectInvalid(s, "prompt_tokens.min (10) must be <= max (5)");
  s.prompt_tokens = Uniform(0, 5);
  ExpectInvalid(s, "prompt_tokens.min must be >= 1");
  s = good;
  s.output_tokens = Fixed(0);
  ExpectInvalid(s, "output_tokens.value must be >= 1");
  s.output_tokens.kind = LengthKind::kLognormal;
  s.output_tokens.min = 1;
  s.output_tokens.max = 10;
  s.output_tokens.mean = 0;
  ExpectInvalid(s, "output_tokens.mean must be a finite number > 0");
  s.output_tokens.mean = 5;
  s.output_tokens.sigma = -1;
  ExpectInvalid(s, "output_tokens.sigma must be a finite number >= 0");
  s = good;
  s.arrival.rate_per_s = 1e-12;  // the 300th arrival lies beyond 2^63 ns
  ExpectInvalid(s, "overflow");
  s = good;
  s.use_trace = true;
  ExpectInvalid(s, "trace.path must not be empty");
  s.trace.path = kFixture;
  s.trace.time_scale = -1;
  ExpectInvalid(s, "trace.time_scale");
  s.trace.time_scale = 1;
  s.trace.block_tokens = 0;
  ExpectInvalid(s, "trace.block_tokens must be >= 1");
}

WorkloadSpec FixtureTrace() {
  WorkloadSpec spec;
  spec.requests = 2;  // ignored for traces
  spec.use_trace = true;
  spec.trace.path = kFixture;
  spec.trace.block_tokens = 4;
  return spec;
}

TEST(WorkloadTest, TraceReplaySharesExactlyTheTraceBlocks) {
  WorkloadSpec spec = FixtureTrace();
  spec.trace.time_scale = 0.5;
  const Workload w = GenerateWorkload(spec, 1);
  ExpectWellFormed(w, 5);
  // Records (4-token blocks): [0,1,2] 10 tokens, [0,1] 8, [0,3] 7, [0] 3, [0,1,2] 12.
  EXPECT_EQ(w.arrival_ns, (std::vector<int64_t>{0, 0, 750'000'000, 1'000'000'000, 1'000'000'000}));
  EXPECT_EQ(w.output_tokens, (std::vector<uint32_t>{5, 3, 2, 1, 9}));
  const PromptSet p = CopyEachPrompt(w.prompts);
  const std::vector<size_t> length = {10, 8, 7, 3, 12};
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(p.Prompt(i).size(), length[i]) << i;
  EXPECT_EQ(Lcp(p.Prompt(0), p.Prompt(1)), 8u);   // blocks 0, 1
  EXPECT_EQ(Lcp(p.Prompt(0), p.Prompt(2)), 4u);   // block 0, then 2 vs 3
  EXPECT_EQ(Lcp(p.Prompt(0), p.Prompt(3)), 3u);   // the whole of record 3 (block 0, cut)
  EXPECT_EQ(Lcp(p.Prompt(0), p.Prompt(4)), 10u);  // record 0 is a prefix of record 4
  EXPECT_EQ(Lcp(p.Prompt(2), p.Prompt(4)), 4u);
  // Groups: second block id 1 -> 0, 3 -> 1, single block 0 -> 2.
  EXPECT_EQ(p.group, (std::vector<uint32_t>{0, 0, 1, 2, 0}));
}

TEST(WorkloadTest, TraceIgnoresSeedAndRequestsAndHonoursLimit) {
  WorkloadSpec spec = FixtureTrace();
  ExpectIdentical(GenerateWorkload(spec, 1), GenerateWorkload(spec, 99));
  spec.trace.limit = 3;
  const Workload w = GenerateWorkload(spec, 1);
  EXPECT_EQ(w.size(), 3u);
  // A block's tokens depend on its id alone, so a prefix of the trace gives a prefix of the
  // prompts.
  const Workload all = GenerateWorkload(FixtureTrace(), 1);
  const std::vector<Token> first = CopyEachPrompt(w.prompts).tokens;
  const std::vector<Token> every = CopyEachPrompt(all.prompts).tokens;
  ASSERT_LE(first.size(), every.size());
  EXPECT_TRUE(std::equal(first.begin(), first.end(), every.begin()));
  spec.trace.time_scale = 0;  // replay offline
  for (const int64_t t : GenerateWorkload(spec, 1).arrival_ns) EXPECT_EQ(t, 0);
}

TEST(WorkloadTest, TraceErrorsNameFileLineAndField) {
  const std::string path = testing::TempDir() + "/feather_workload_bad_trace.jsonl";
  {
    std::ofstream out(path);
    out << R"({"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [0, 1, 2]})"
        << "\n"
        << R"({"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [0, 1]})"
        << "\n";
  }
  WorkloadSpec spec = FixtureTrace();
  spec.trace.path = path;
  try {
    (void)GenerateWorkload(spec, 1);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    ASSERT_EQ(e.problems().size(), 1u);
    EXPECT_EQ(std::string(e.what()),
              path + ":2: hash_ids: has 2 ids, but input_length 10 needs ceil(10/4) = 3");
  }
  std::filesystem::remove(path);
  spec.trace.path = path;  // now missing
  EXPECT_THROW((void)GenerateWorkload(spec, 1), InputError);
}

TEST(WorkloadTest, ClosedLoopNamesEachTurnsPredecessor) {
  WorkloadSpec spec = FixtureTrace();
  EXPECT_TRUE(GenerateWorkload(spec, 1).predecessor.empty());  // open loop: none
  spec.trace.closed_loop = true;
  const Workload w = GenerateWorkload(spec, 1);
  // Records [0,1,2], [0,1], [0,3], [0], [0,1,2]: record 1 continues 0 (two blocks); 2 and 3
  // share only block 0 with anyone; record 4 shares three blocks with 0 and two with 1.
  EXPECT_EQ(w.predecessor, (std::vector<RequestId>{kNoRequest, 0, kNoRequest, kNoRequest, 0}));
}

// Brute force: the latest earlier record with the longest common leading run of block ids, if
// that run has at least kMinTurnBlocks blocks.
std::vector<RequestId> BrutePredecessors(const std::vector<std::vector<uint64_t>>& records) {
  std::vector<RequestId> out(records.size(), kNoRequest);
  for (size_t i = 0; i < records.size(); ++i) {
    size_t best_run = 0;
    for (size_t j = 0; j < i; ++j) {
      size_t run = 0;
      while (run < records[i].size() && run < records[j].size() &&
             records[i][run] == records[j][run]) {
        ++run;
      }
      if (run >= kMinTurnBlocks && run >= best_run) {  // >=: the latest of equal runs
        best_run = run;
        out[i] = static_cast<RequestId>(j);
      }
    }
  }
  return out;
}

TEST(WorkloadTest, ClosedLoopPredecessorsMatchBruteForceOnRandomTraces) {
  const std::string path = testing::TempDir() + "/feather_closed_loop_trace.jsonl";
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(seed);
    Rng rng(seed);
    // Conversations as chains of block ids: each record continues a random earlier one (a
    // random leading run of it, then new ids) or starts afresh after block 0; ids come from a
    // small pool at times, so unrelated records also repeat ids at other positions.
    std::vector<std::vector<uint64_t>> records;
    uint64_t next_id = 1;
    for (int i = 0; i < 60; ++i) {
      std::vector<uint64_t> r{0};
      if (!records.empty() && rng.NextU64() % 3 != 0) {
        const auto& from = records[rng.NextU64() % records.size()];
        r.assign(from.begin(), from.begin() + 1 + rng.NextU64() % from.size());
      }
      const uint64_t extra = rng.NextU64() % 4;
      for (uint64_t k = 0; k < extra; ++k) {
        r.push_back(rng.NextU64() % 4 == 0 ? 1 + rng.NextU64() % 3 : 100 + next_id++);
      }
      records.push_back(r);
    }
    std::ofstream out(path);
    for (const auto& r : records) {
      out << "{\"timestamp\": 0, \"input_length\": " << r.size() * 4 << ", \"output_length\": 1, "
          << "\"hash_ids\": [";
      for (size_t k = 0; k < r.size(); ++k) out << (k ? ", " : "") << r[k];
      out << "]}\n";
    }
    out.close();
    WorkloadSpec spec;
    spec.use_trace = true;
    spec.trace.path = path;
    spec.trace.block_tokens = 4;
    spec.trace.closed_loop = true;
    EXPECT_EQ(GenerateWorkload(spec, 1).predecessor, BrutePredecessors(records));
  }
  std::filesystem::remove(path);
}

TEST(WorkloadTest, RealTraceFirstHundredRequests) {
  if (!std::filesystem::exists(kRealTrace)) GTEST_SKIP() << kRealTrace << " not present";
  WorkloadSpec spec;
  spec.use_trace = true;
  spec.trace.path = kRealTrace;
  spec.trace.limit = 100;
  const Workload w = GenerateWorkload(spec, 1);
  ExpectWellFormed(w, 100);
  EXPECT_EQ(w.prompts.Prompt(0).size(), 6758u);
  EXPECT_EQ(w.output_tokens[0], 500u);
  const PromptSet p = CopyEachPrompt(w.prompts);
  for (size_t i = 1; i < p.size(); ++i) {
    // Block 0 is the common system prefix of every request.
    EXPECT_GE(Lcp(p.Prompt(i), p.Prompt(0)), std::min<size_t>(512, p.Prompt(i).size())) << i;
    for (size_t j = 0; j < i; ++j) {
      if (p.group[i] != p.group[j]) continue;
      // Same group = same second block: they share at least two blocks.
      const size_t bound = std::min({p.Prompt(i).size(), p.Prompt(j).size(), size_t{1024}});
      EXPECT_GE(Lcp(p.Prompt(i), p.Prompt(j)), bound) << i << " vs " << j;
    }
  }
}

}  // namespace
}  // namespace feather
