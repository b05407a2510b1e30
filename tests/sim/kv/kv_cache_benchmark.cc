// kv_cache_benchmark.cc: Google Benchmark of the KV cache in a steady state: a fixed population
// of running requests from grouped prompts; each iteration finishes the oldest request and
// admits a new one (lookup, first allocation with prefix hits, mark computed), then grows every
// running request by one decode token, as one serving step does.
#include <benchmark/benchmark.h>

#include <vector>

#include "policies/block_hash_table.h"
#include "sim/kv/kv_cache.h"
#include "sim/workload/synthetic_prompts.h"

namespace feather {
namespace {

struct Running {
  RequestId id = 0;
  uint32_t prompt = 0;
  uint32_t total_tokens = 0;
};

// range(0): running requests; range(1): pool blocks (small pools force evictions).
void BM_ServingStep(benchmark::State& state) {
  const auto running = static_cast<uint32_t>(state.range(0));
  const auto num_blocks = static_cast<uint64_t>(state.range(1));
  constexpr uint32_t kPrompts = 512;
  const PromptSet prompts = MakeGroupedPrompts(kPrompts, 8, 1000, 200, 1);
  const BlockHashTable hasher;
  std::vector<std::vector<PrefixHash>> chains;
  for (uint32_t p = 0; p < kPrompts; ++p) chains.push_back(hasher.ComputeChain(prompts.Prompt(p)));

  KvCache kv(KvCacheConfig{16, num_blocks, true});
  std::vector<Running> batch(running);
  uint32_t next_prompt = 0;
  auto admit = [&](Running& r, RequestId id) {
    r = Running{id, next_prompt++ % kPrompts, 0};
    const std::vector<PrefixHash>& chain = chains[r.prompt];
    const auto prompt_tokens = static_cast<uint32_t>(prompts.Prompt(r.prompt).size());
    benchmark::DoNotOptimize(kv.LookupCachedTokens(chain, prompt_tokens));
    if (kv.Allocate(id, chain, prompt_tokens, prompt_tokens)) {
      kv.CacheBlocks(id, chain, prompt_tokens);
      r.total_tokens = prompt_tokens;
    }
  };
  for (uint32_t i = 0; i < running; ++i) admit(batch[i], i);
  uint32_t oldest = 0;
  uint64_t allocations = 0;
  for (auto _ : state) {
    Running& victim = batch[oldest];
    kv.Free(victim.id);
    admit(victim, victim.id);
    oldest = (oldest + 1) % running;
    for (Running& r : batch) {
      if (r.total_tokens == 0) continue;  // its admission failed: the pool is full
      const auto prompt_tokens = static_cast<uint32_t>(prompts.Prompt(r.prompt).size());
      if (kv.Allocate(r.id, chains[r.prompt], prompt_tokens, r.total_tokens + 1)) ++r.total_tokens;
    }
    allocations += running + 1;
  }
  state.SetItemsProcessed(static_cast<int64_t>(allocations));
  state.counters["evictions"] = static_cast<double>(kv.evictions());
  state.counters["cached_blocks"] = static_cast<double>(kv.NumCachedBlocks());
}
BENCHMARK(BM_ServingStep)->Args({64, 4096})->Args({256, 16384});

}  // namespace
}  // namespace feather
