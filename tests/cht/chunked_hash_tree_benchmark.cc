// chunked_hash_tree_benchmark.cc: Google Benchmark microbenchmarks of the CHT's operations in a
// steady state (a fixed waiting population churned through a batch), and of prefix hashing.
#include <benchmark/benchmark.h>

#include <vector>

#include "cht/chunked_hash_tree.h"
#include "sim/workload/synthetic_prompts.h"

namespace feather {
namespace {

void BM_StreamingHashes(benchmark::State& state) {
  const auto tokens = static_cast<uint32_t>(state.range(0));
  const PromptSet set = MakeGroupedPrompts(1, 1, tokens, 0, 1);
  std::vector<PrefixHash> out;
  for (auto _ : state) {
    ComputeStreamingHashes(set.Prompt(0), 50, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * tokens * sizeof(Token));
}
BENCHMARK(BM_StreamingHashes)->Arg(1000)->Arg(5000)->Arg(20000);

void BM_ChainedHashes(benchmark::State& state) {
  const auto tokens = static_cast<uint32_t>(state.range(0));
  const auto threads = static_cast<unsigned>(state.range(1));
  const PromptSet set = MakeGroupedPrompts(1, 1, tokens, 0, 1);
  std::vector<PrefixHash> out;
  for (auto _ : state) {
    ComputeChainedHashes(set.Prompt(0), 256, out, threads);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * tokens * sizeof(Token));
}
BENCHMARK(BM_ChainedHashes)->Args({20000, 1})->Args({20000, 2})->Args({1000000, 1})->Args({1000000, 2});

// Steady state: `waiting` prompts of 5 groups wait; each iteration admits the best candidate,
// finishes the oldest active request, and re-inserts it (same id) so the population is constant.
void BM_ChurnOneRequest(benchmark::State& state) {
  const auto prefix = static_cast<uint32_t>(state.range(0));
  const auto waiting = static_cast<uint32_t>(state.range(1));
  const uint32_t batch = 256;
  const PromptSet set = MakeGroupedPrompts(waiting + batch, 5, prefix, 100, 7);
  ChtConfig config;
  config.expected_requests = waiting + batch;
  ChunkedHashTree tree(config);
  for (RequestId id = 0; id < set.size(); ++id) tree.Insert(id, set.Prompt(id));
  std::vector<RequestId> ring;
  for (uint32_t i = 0; i < batch; ++i) {
    const auto best = tree.FindBest();
    tree.AddToBatch(best->request);
    ring.push_back(best->request);
  }
  size_t oldest = 0;
  for (auto _ : state) {
    const RequestId done = ring[oldest];
    tree.Finish(done);
    tree.Insert(done, set.Prompt(done));
    const auto best = tree.FindBest();
    tree.AddToBatch(best->request);
    ring[oldest] = best->request;
    oldest = (oldest + 1) % ring.size();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_ChurnOneRequest)->Args({4000, 1000})->Args({4000, 5000})->Args({20000, 5000});

}  // namespace
}  // namespace feather

namespace feather {
namespace {

// One scheduling round as `feather bench sched-overhead` times it: `waiting` prompts of 5 groups
// wait, the working set is empty, and FindBest/AddToBatch admit 500 requests. The admitted
// requests are requeued (untimed) between iterations, which restores the waiting state.
void BM_RoundOf500(benchmark::State& state) {
  const auto prefix = static_cast<uint32_t>(state.range(0));
  const auto waiting = static_cast<uint32_t>(state.range(1));
  const PromptSet set = MakeGroupedPrompts(waiting, 5, prefix, 100, 7);
  ChtConfig config;
  config.expected_requests = waiting;
  ChunkedHashTree tree(config);
  for (RequestId id = 0; id < set.size(); ++id) tree.Insert(id, set.Prompt(id));
  std::vector<RequestId> admitted;
  for (auto _ : state) {
    admitted.clear();
    while (admitted.size() < 500) {
      const auto best = tree.FindBest();
      if (!best) break;
      tree.AddToBatch(best->request);
      admitted.push_back(best->request);
    }
    state.PauseTiming();
    for (RequestId id : admitted) tree.Requeue(id);
    state.ResumeTiming();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * 500);
}
BENCHMARK(BM_RoundOf500)->Args({20000, 5000})->Args({1000, 5000})->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace feather
