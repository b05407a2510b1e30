// block_table_selector_benchmark.cc: BlockTableSelector rounds in a serving steady state.
//
// A queue of `waiting` requests and a batch of 16 running ones, at a fixed load: each iteration
// is one serving round -- the oldest running request finishes, a new request arrives (its prompt
// hashed and its depths measured), BeginRound orders the queue, and the first proposal is
// admitted. Prompts come from a pool of 512 in 8 groups, each a 90 % group prefix plus a unique
// suffix, `tokens` long (1000 tokens = 62 blocks of 16). items = rounds. `queue_chain_blocks` is
// the number of block hashes the queue holds: the per-round hash probes of the former BeginRound,
// which rescanned every waiting chain.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <deque>

#include "policies/block_table_selector.h"
#include "sim/workload/synthetic_prompts.h"

namespace feather {
namespace {

constexpr uint32_t kRunning = 16;
constexpr uint32_t kPool = 512;

void BM_SteadyStateRound(benchmark::State& state) {
  const auto waiting = static_cast<uint32_t>(state.range(0));
  const auto tokens = static_cast<uint32_t>(state.range(1));
  const uint32_t suffix = tokens / 10;
  const PromptSet pool = MakeGroupedPrompts(kPool, 8, tokens - suffix, suffix, 1);
  BlockTableSelector s;
  size_t next_prompt = 0;
  const auto arrive = [&](RequestId id) {
    s.OnArrival(RequestInfo{id, pool.Prompt(next_prompt), kNoPrefixGroup});
    next_prompt = (next_prompt + 1) % pool.size();
  };
  RequestId next_id = 0;
  for (; next_id < waiting + kRunning; ++next_id) arrive(next_id);
  std::deque<RequestId> running;
  s.BeginRound();
  while (running.size() < kRunning) {
    const RequestId id = s.Next()->id;
    s.Admit(id);
    running.push_back(id);
  }
  for (auto _ : state) {
    const RequestId done = running.front();
    running.pop_front();
    s.OnFinish(done);
    arrive(done);  // ids are recycled: the queue and the batch keep their sizes
    s.BeginRound();
    const RequestId id = s.Next()->id;
    s.Admit(id);
    running.push_back(id);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.counters["queue_chain_blocks"] = static_cast<double>(waiting) * (tokens / 16);
}
BENCHMARK(BM_SteadyStateRound)
    ->ArgNames({"waiting", "tokens"})
    ->ArgsProduct({{100, 1000, 5000}, {1000, 10000}});

}  // namespace
}  // namespace feather
