// radix_cache_benchmark.cc: RadixCache match and insert at 1K-20K-token prompts, in steady state.
//
// Match: a warm cache of 64 radix-shaped prompts (2 levels x 4 branches + unique suffix); each
// iteration matches one cached prompt end to end. Insert: a cache at a fixed load (capacity of 16
// prompts) churned by a pool of 256 prompts, so every insert also evicts. "Shared" prompts reuse
// a per-group prefix (90% of the prompt), "unique" ones share nothing. items = key tokens,
// bytes = key bytes. Fan-out and deep-path cases isolate the per-node child lookup cost.
//
// Lengths are decimal on purpose: with power-of-two prompt lengths (1024, 2048 tokens) every
// prompt of the pool and every arena append start at the same offset modulo 4 KiB, and glibc's
// `rep movsb` copy then runs about 3x slower (4K aliasing) -- an artifact of the pool's layout,
// not of the cache.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "policies/radix_cache.h"
#include "sim/workload/synthetic_prompts.h"

namespace feather {
namespace {

constexpr uint32_t kSuffixTokens = 100;

PromptSet MatchPrompts(uint32_t tokens) {
  RadixShape shape;
  shape.levels = 2;
  shape.branching = 4;
  shape.tokens_per_level = (tokens - kSuffixTokens) / 2;
  shape.unique_suffix_tokens = tokens - 2 * shape.tokens_per_level;
  return MakeRadixPrompts(shape, 64, 1);
}

void SetThroughput(benchmark::State& state, uint64_t tokens) {
  state.SetItemsProcessed(static_cast<int64_t>(tokens));
  state.SetBytesProcessed(static_cast<int64_t>(tokens * sizeof(Token)));
}

void BM_MatchPrefix(benchmark::State& state) {
  const uint32_t tokens = static_cast<uint32_t>(state.range(0));
  const uint32_t page = static_cast<uint32_t>(state.range(1));
  const PromptSet prompts = MatchPrompts(tokens);
  RadixCache cache(RadixCacheConfig{page, 0});
  for (size_t i = 0; i < prompts.size(); ++i) (void)cache.Insert(prompts.Prompt(i));
  for (size_t i = 0; i < prompts.size(); ++i) (void)cache.MatchPrefix(prompts.Prompt(i));
  size_t i = 0;
  uint64_t matched = 0;
  for (auto _ : state) {
    const RadixMatch m = cache.MatchPrefix(prompts.Prompt(i));
    benchmark::DoNotOptimize(m);
    matched += m.matched_tokens;
    i = (i + 1) % prompts.size();
  }
  SetThroughput(state, matched);
  state.counters["nodes"] = static_cast<double>(cache.NodeCount());
}
BENCHMARK(BM_MatchPrefix)
    ->ArgNames({"tokens", "page"})
    ->ArgsProduct({{1000, 2000, 5000, 10000, 20000}, {1, 16}});

// The same lengths without touching or splitting (what a report or a check pays).
void BM_PeekMatchTokens(benchmark::State& state) {
  const uint32_t tokens = static_cast<uint32_t>(state.range(0));
  const PromptSet prompts = MatchPrompts(tokens);
  RadixCache cache;
  for (size_t i = 0; i < prompts.size(); ++i) (void)cache.Insert(prompts.Prompt(i));
  size_t i = 0;
  uint64_t matched = 0;
  for (auto _ : state) {
    const uint64_t m = cache.PeekMatchTokens(prompts.Prompt(i));
    benchmark::DoNotOptimize(m);
    matched += m;
    i = (i + 1) % prompts.size();
  }
  SetThroughput(state, matched);
}
BENCHMARK(BM_PeekMatchTokens)->ArgName("tokens")->Arg(1000)->Arg(20000);

void BM_Insert(benchmark::State& state) {
  const uint32_t tokens = static_cast<uint32_t>(state.range(0));
  const bool shared = state.range(1) != 0;
  const uint32_t page = static_cast<uint32_t>(state.range(2));
  constexpr uint32_t kPool = 256;
  const uint32_t prefix = shared ? tokens / 10 * 9 : 0;
  const PromptSet prompts =
      MakeGroupedPrompts(kPool, shared ? 8 : kPool, prefix, tokens - prefix, 3);
  RadixCache cache(RadixCacheConfig{page, uint64_t{16} * tokens});
  for (size_t i = 0; i < prompts.size(); ++i) (void)cache.Insert(prompts.Prompt(i));  // warm up
  size_t i = 0;
  uint64_t keyed = 0;
  for (auto _ : state) {
    const RadixInsert r = cache.Insert(prompts.Prompt(i));
    benchmark::DoNotOptimize(r);
    keyed += prompts.Prompt(i).size();
    i = (i + 1) % prompts.size();
  }
  SetThroughput(state, keyed);
  state.counters["evicted_tok_per_insert"] =
      benchmark::Counter(static_cast<double>(cache.EvictedTokensTotal()) /
                         static_cast<double>(state.iterations() + kPool));
}
BENCHMARK(BM_Insert)
    ->ArgNames({"tokens", "shared", "page"})
    ->ArgsProduct({{1000, 2000, 5000, 10000, 20000}, {0, 1}, {1, 16}});

// Child lookup cost with a wide root: `children` cached 64-token prompts that share nothing.
void BM_MatchWideFanout(benchmark::State& state) {
  const uint32_t fanout = static_cast<uint32_t>(state.range(0));
  const PromptSet prompts = MakeGroupedPrompts(fanout, fanout, 64, 0, 5);
  RadixCache cache;
  for (size_t i = 0; i < prompts.size(); ++i) (void)cache.Insert(prompts.Prompt(i));
  size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(cache.MatchPrefix(prompts.Prompt(i)));
    i = (i * 7 + 1) % prompts.size();  // jump around the table
  }
  SetThroughput(state, state.iterations() * 64);
}
BENCHMARK(BM_MatchWideFanout)->ArgName("children")->Arg(16)->Arg(1024)->Arg(16384);

// Per-node cost: a path of `nodes` eight-token edges, each ending where a one-token sibling
// branches off.
void BM_MatchDeepPath(benchmark::State& state) {
  const uint32_t nodes = static_cast<uint32_t>(state.range(0));
  constexpr uint32_t kEdge = 8;
  std::vector<Token> path;
  RadixCache cache;
  for (uint32_t n = 0; n < nodes; ++n) {
    for (uint32_t k = 0; k < kEdge; ++k) path.push_back(static_cast<Token>(n * kEdge + k + 1));
    std::vector<Token> branch = path;
    branch.push_back(-static_cast<Token>(n + 1));  // a sibling ending every edge
    (void)cache.Insert(branch);
  }
  for (auto _ : state) benchmark::DoNotOptimize(cache.MatchPrefix(path));
  SetThroughput(state, state.iterations() * path.size());
  state.counters["ns_per_node"] =
      benchmark::Counter(static_cast<double>(nodes) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_MatchDeepPath)->ArgName("nodes")->Arg(64)->Arg(1024);

}  // namespace
}  // namespace feather
