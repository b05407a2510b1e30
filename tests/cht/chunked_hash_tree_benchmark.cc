// chunked_hash_tree_benchmark.cc: Google Benchmark microbenchmarks of the CHT's operations in a
// steady state (a fixed waiting population churned through a batch), and of prefix hashing.
#include <benchmark/benchmark.h>
#include <xxhash.h>
#if defined(__x86_64__)
#define XXH_DISPATCH_DISABLE_REPLACE  // keep XXH3_64bits the library's plain export
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <chrono>
#include <memory>
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

// One in-cache prompt of state.range(0) tokens through a prefix-hash function, 50-token chunks:
// the striped scheme, the AES scheme (VAES where the CPU has it) and its AES-NI path (128-bit
// rounds: CPUs without VAES take it), beside XXH3 alone (HashWhole, below).
void HashChunks(benchmark::State& state,
                void (*hash)(PromptView, uint32_t, std::vector<PrefixHash>&)) {
  const auto tokens = static_cast<uint32_t>(state.range(0));
  const PromptSet set = MakeGroupedPrompts(1, 1, tokens, 0, 1);
  std::vector<PrefixHash> out;
  for (auto _ : state) {
    hash(set.Prompt(0), 50, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * tokens * sizeof(Token));
}

void AesNiHashes(PromptView tokens, uint32_t chunk_tokens, std::vector<PrefixHash>& out) {
  prefix_hash_internal::ComputeAesHashesVia(prefix_hash_internal::AesPath::kAesNi, tokens,
                                            chunk_tokens, out);
}

void BM_StripedHashes(benchmark::State& state) { HashChunks(state, &ComputeStripedHashes); }
BENCHMARK(BM_StripedHashes)->Arg(1000)->Arg(5000)->Arg(20000);
void BM_AesHashes(benchmark::State& state) { HashChunks(state, &ComputeAesHashes); }
BENCHMARK(BM_AesHashes)->Arg(1000)->Arg(5000)->Arg(20000);
void BM_AesHashesAesNi(benchmark::State& state) { HashChunks(state, &AesNiHashes); }
BENCHMARK(BM_AesHashesAesNi)->Arg(1000)->Arg(5000)->Arg(20000);

// One prompt of state.range(0) tokens hashed whole by `hash` (an XXH3 entry point).
void HashWhole(benchmark::State& state, XXH64_hash_t (*hash)(const void*, size_t)) {
  const auto tokens = static_cast<uint32_t>(state.range(0));
  const PromptSet set = MakeGroupedPrompts(1, 1, tokens, 0, 1);
  for (auto _ : state) {
    const auto prompt = set.Prompt(0);
    benchmark::DoNotOptimize(hash(prompt.data(), prompt.size_bytes()));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * tokens * sizeof(Token));
}

void BM_Xxh3Whole(benchmark::State& state) { HashWhole(state, &XXH3_64bits); }
BENCHMARK(BM_Xxh3Whole)->Arg(1000)->Arg(5000)->Arg(20000);

#if defined(__x86_64__)
// XXH3 through libxxhash's runtime dispatch (AVX2 or AVX-512 where the CPU has them).
void BM_Xxh3DispatchWhole(benchmark::State& state) { HashWhole(state, &XXH3_64bits_dispatch); }
BENCHMARK(BM_Xxh3DispatchWhole)->Arg(1000)->Arg(5000)->Arg(20000);
#endif

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
BENCHMARK(BM_ChainedHashes)
    ->Args({20000, 1})
    ->Args({20000, 2})
    ->Args({1000000, 1})
    ->Args({1000000, 2});

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

// The round `feather bench sched-overhead` times, on a fresh tree as there: one request of each of
// the 5 groups has run and finished, then `waiting` requests queue up (untimed, rebuilt every
// iteration), and FindBest/AddToBatch admit 500. Where BM_RoundOf500 measures a tree churned by
// requeues (stale entries in the global heap and out-of-order queue pushes), this is the state the
// issue-19 target is stated on. Fixed iterations: each one rebuilds the tree (seconds of setup).
void BM_FreshRound(benchmark::State& state) {
  const auto prefix = static_cast<uint32_t>(state.range(0));
  const auto waiting = static_cast<uint32_t>(state.range(1));
  const PromptSet history = MakeGroupedPrompts(5, 5, prefix, 100, 7);
  const PromptSet queue = MakeGroupedPrompts(waiting, 5, prefix, 100, 7);
  std::vector<RequestId> admitted;
  for (auto _ : state) {
    state.PauseTiming();
    ChtConfig config;
    config.expected_requests = waiting + 5;
    auto tree = std::make_unique<ChunkedHashTree>(config);
    RequestId next = 0;
    for (size_t i = 0; i < history.size(); ++i) tree->Insert(next++, history.Prompt(i));
    admitted.clear();
    while (const auto best = tree->FindBest()) {
      tree->AddToBatch(best->request);
      admitted.push_back(best->request);
    }
    for (RequestId id : admitted) tree->Finish(id);
    for (size_t i = 0; i < queue.size(); ++i) tree->Insert(next++, queue.Prompt(i));
    state.ResumeTiming();
    for (uint32_t count = 0; count < 500; ++count) {
      const auto best = tree->FindBest();
      if (!best) break;
      tree->AddToBatch(best->request);
    }
    state.PauseTiming();
    tree.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * 500);
}
BENCHMARK(BM_FreshRound)->Args({20000, 5000})->Iterations(20)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace feather

namespace feather {
namespace {

// Issue 19's insert target: CHT Insert (prefix hashes + tree insertion) against hashing the same
// tokens with XXH3 alone, measured side by side. `waiting` prompts of 5 groups with a
// `prefix`-token shared prefix and 100 unique tokens wait; each iteration removes 64 of them
// (untimed) and re-inserts them (timed), and times three other passes over the same 64 prompts:
// XXH3_64bits as libxxhash exports it (its build's vector path: SSE2 on x86-64 distributions),
// XXH3_64bits_dispatch (XXH3's runtime choice of its best path, AVX2 or AVX-512 where the CPU
// has them), and the tree's prefix hashes alone (ComputePrefixHashes into a reused vector: what
// Insert spends before it touches the tree). The striped scheme takes AVX2 where the CPU has it,
// so the dispatch baseline is the like-for-like one. The four passes rotate (each comes first in
// one iteration of four), so none always finds the prompts cached. Counters per prompt: insert_ns,
// xxh3_ns, xxh3_dispatch_ns, hash_ns; ratios insert_over_xxh3, insert_over_xxh3_dispatch (the
// target is <= 1.3) and hash_over_xxh3_dispatch (the hashing's share of the gap; insert_ns -
// hash_ns is about the tree's). Run with --benchmark_repetitions=N for the spread. Second
// argument: the hash scheme (0 streaming, the paper's Alg. ComputeHashes; 1 chained; 2 striped).
void BM_InsertVsXxh3(benchmark::State& state) {
  using Clock = std::chrono::steady_clock;
  const auto prefix = static_cast<uint32_t>(state.range(0));
  const uint32_t waiting = 1000;
  const uint32_t batch = 64;
  const PromptSet set = MakeGroupedPrompts(waiting, 5, prefix, 100, 7);
  ChtConfig config;
  config.expected_requests = waiting;
  config.hash_scheme = static_cast<HashScheme>(state.range(1));
  ChunkedHashTree tree(config);
  for (RequestId id = 0; id < set.size(); ++id) tree.Insert(id, set.Prompt(id));
  // insert, XXH3_64bits, XXH3_64bits_dispatch, prefix hashes alone
  uint64_t elapsed_ns[4] = {};
  std::vector<PrefixHash> hashes;
  uint64_t prompts = 0;
  uint64_t sink = 0;
  RequestId next = 0;
  uint32_t rotation = 0;
  for (auto _ : state) {
    const RequestId first = next;
    next = (next + batch) % (waiting - batch);
    for (RequestId id = first; id < first + batch; ++id) tree.Remove(id);
    const auto time_part = [&](int part) {
      const auto start = Clock::now();
      for (RequestId id = first; id < first + batch; ++id) {
        const auto prompt = set.Prompt(id);
        if (part == 0) {
          tree.Insert(id, prompt);
        } else if (part == 1) {
          sink += XXH3_64bits(prompt.data(), prompt.size_bytes());
        } else if (part == 2) {
#if defined(__x86_64__)
          sink += XXH3_64bits_dispatch(prompt.data(), prompt.size_bytes());
#else
          sink += XXH3_64bits(prompt.data(), prompt.size_bytes());
#endif
        } else {
          ComputePrefixHashes(config.hash_scheme, prompt, config.chunk_tokens, hashes);
          sink += hashes.back();
        }
      }
      elapsed_ns[part] += static_cast<uint64_t>((Clock::now() - start).count());
    };
    for (int i = 0; i < 4; ++i) time_part(static_cast<int>((rotation + i) % 4));
    rotation = (rotation + 1) % 4;
    prompts += batch;
  }
  benchmark::DoNotOptimize(sink);
  const auto per_prompt = [&](uint64_t ns) {
    return static_cast<double>(ns) / static_cast<double>(std::max<uint64_t>(1, prompts));
  };
  const auto ratio = [](uint64_t ns, uint64_t baseline_ns) {
    return static_cast<double>(ns) / static_cast<double>(std::max<uint64_t>(1, baseline_ns));
  };
  state.counters["insert_ns"] = per_prompt(elapsed_ns[0]);
  state.counters["xxh3_ns"] = per_prompt(elapsed_ns[1]);
  state.counters["xxh3_dispatch_ns"] = per_prompt(elapsed_ns[2]);
  state.counters["hash_ns"] = per_prompt(elapsed_ns[3]);
  state.counters["insert_over_xxh3"] = ratio(elapsed_ns[0], elapsed_ns[1]);
  state.counters["insert_over_xxh3_dispatch"] = ratio(elapsed_ns[0], elapsed_ns[2]);
  state.counters["hash_over_xxh3_dispatch"] = ratio(elapsed_ns[3], elapsed_ns[2]);
  state.SetItemsProcessed(static_cast<int64_t>(prompts));
}
BENCHMARK(BM_InsertVsXxh3)
    ->ArgNames({"prefix", "scheme"})
    ->Args({4000, 0})
    ->Args({20000, 0})
    ->Args({4000, 1})
    ->Args({20000, 1})
    ->Args({4000, 2})
    ->Args({20000, 2})
    ->Args({4000, 3})
    ->Args({20000, 3})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace feather
