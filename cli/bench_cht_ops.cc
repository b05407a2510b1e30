// bench_cht_ops.cc: per-operation timing of the Chunked Hash Tree under batch formation.
//
// The driver is a miniature continuous-batching loop: all prompts wait at the start (the paper's
// offline setting, the largest waiting queue); every step forms a batch with FindBest + a fixed
// stop rule, then "decodes" one token for every active request and finishes those whose output
// length is reached. Prompts are generated one at a time into a reused buffer, so the process's
// peak RSS is the tree's memory plus a constant, not the workload's token storage.
#include "cli/bench_cht_ops.h"

#include <algorithm>
#include <chrono>
#include <type_traits>
#include <string>
#include <vector>

#include "base/check.h"
#include "cht/chunked_hash_tree.h"
#include "hw/host_info.h"
#include "base/rng.h"

namespace feather {
namespace {

using Clock = std::chrono::steady_clock;

struct OpStats {
  uint64_t calls = 0;
  uint64_t total_ns = 0;
  [[nodiscard]] nlohmann::json ToJson() const {
    return {{"calls", calls},
            {"total_ns", total_ns},
            {"mean_ns", calls == 0 ? 0.0 : static_cast<double>(total_ns) / static_cast<double>(calls)}};
  }
};

template <typename Fn>
auto Timed(OpStats& stats, Fn&& fn) {
  const auto start = Clock::now();
  if constexpr (std::is_void_v<decltype(fn())>) {
    fn();
    stats.total_ns += static_cast<uint64_t>((Clock::now() - start).count());
    ++stats.calls;
  } else {
    auto result = fn();
    stats.total_ns += static_cast<uint64_t>((Clock::now() - start).count());
    ++stats.calls;
    return result;
  }
}

// The batch-formation rule of this benchmark (not a scheduler policy): admit into a small batch
// whatever the tip loss, afterwards only candidates that cost at most 5 chunks of shared prefix,
// up to max_batch. It yields prefix-homogeneous batches, as Feather's policies do.
bool Admit(const ChtCandidate& c, size_t batch, uint32_t max_batch) {
  if (batch >= max_batch) return false;
  return batch < 10 || c.tip_before - c.tip_after <= 5;
}

}  // namespace

nlohmann::json RunChtOpsBenchmark(const ChtOpsOptions& o) {
  FEATHER_CHECK(o.groups > 0 && o.prefix_tokens <= o.prompt_tokens, "bad cht-ops workload");
  Rng rng(o.seed);
  std::vector<std::vector<Token>> prefixes(o.groups);
  for (auto& prefix : prefixes) {
    prefix.resize(o.prefix_tokens);
    for (Token& t : prefix) t = static_cast<Token>(1 + rng.Uniform(150000));
  }
  ChtConfig config;
  config.chunk_tokens = o.chunk_tokens;
  config.expected_requests = o.requests;
  config.expected_chunks =
      o.groups * (o.prefix_tokens / o.chunk_tokens + 1) +
      o.requests * ((o.prompt_tokens - o.prefix_tokens) / o.chunk_tokens + 2);
  const size_t rss_before = CurrentRssBytes();
  ChunkedHashTree tree(config);

  OpStats insert, add, finish, find_best;
  std::vector<Token> prompt(o.prompt_tokens);
  std::vector<uint32_t> remaining(o.requests);
  for (RequestId id = 0; id < o.requests; ++id) {
    const auto& prefix = prefixes[id % o.groups];
    std::copy(prefix.begin(), prefix.end(), prompt.begin());
    for (size_t i = o.prefix_tokens; i < o.prompt_tokens; ++i) {
      prompt[i] = static_cast<Token>(1 + rng.Uniform(150000));
    }
    remaining[id] = static_cast<uint32_t>(rng.UniformInt(1, 200));
    Timed(insert, [&] { tree.Insert(id, prompt); });
  }

  std::vector<RequestId> active;
  active.reserve(o.max_batch);
  uint64_t steps = 0;
  size_t peak_cht_bytes = tree.MemoryBytes();
  while (tree.NumWaiting() > 0 || !active.empty()) {
    for (;;) {
      const auto best = Timed(find_best, [&] { return tree.FindBest(); });
      if (!best || !Admit(*best, active.size(), o.max_batch)) break;
      Timed(add, [&] { tree.AddToBatch(best->request); });
      active.push_back(best->request);
    }
    ++steps;
    size_t kept = 0;
    for (RequestId id : active) {
      if (--remaining[id] == 0) {
        Timed(finish, [&] { tree.Finish(id); });
      } else {
        active[kept++] = id;
      }
    }
    active.resize(kept);
    if (steps % 64 == 0) peak_cht_bytes = std::max(peak_cht_bytes, tree.MemoryBytes());
  }

  nlohmann::json result;
  result["workload"] = {{"requests", o.requests},           {"prompt_tokens", o.prompt_tokens},
                        {"prefix_tokens", o.prefix_tokens}, {"groups", o.groups},
                        {"chunk_tokens", o.chunk_tokens},   {"max_batch", o.max_batch},
                        {"seed", o.seed},                   {"decode_steps", steps}};
  result["operations"] = {{"insert", insert.ToJson()},
                          {"add_to_batch", add.ToJson()},
                          {"finish", finish.ToJson()},
                          {"find_best", find_best.ToJson()}};
  result["cht_peak_bytes"] = peak_cht_bytes;
  result["rss_before_tree_bytes"] = rss_before;
  result["peak_rss_bytes"] = PeakRssBytes();
  result["timer"] = "std::chrono::steady_clock around each call (its ~20 ns cost included)";
  result["provenance"] = ToJson(ReadHostInfo());
  return result;
}

}  // namespace feather
