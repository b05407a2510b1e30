// bench_sched_overhead.cc: CPU time of one scheduling round per selector (see the header).
//
// The state before the timed round is a server with history: one request of every prefix group
// has already run and finished (so radix caches and block tables hold every group's prefix, as
// on a warm server), then `waiting` requests queue up. The round is BeginRound() followed by
// Next()/Admit() until `max_batch` requests are admitted or the queue is empty; no stop policy,
// so every selector admits the same number of requests. Setup is untimed and rebuilt for every
// repetition; repetitions interleave the selectors. A row reports the median, minimum and maximum
// over repetitions and, when CHT is among the selectors, the median and spread of the
// per-repetition ratio to CHT's round (over_cht, over_cht_min, over_cht_max).
#include "cli/bench_sched_overhead.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "hw/host_info.h"
#include "policies/selector_factory.h"
#include "sim/workload/synthetic_prompts.h"

namespace feather {
namespace {

using Clock = std::chrono::steady_clock;

struct RoundResult {
  uint64_t round_ns = 0;
  uint32_t admitted = 0;
};

RoundResult TimeOneRound(std::string_view name, const PromptSet& history,
                         const PromptSet& queue, const SchedOverheadOptions& o) {
  SelectorOptions options;
  options.expected_requests = static_cast<uint32_t>(history.size() + queue.size());
  auto selector = MakeSelector(name, options);
  const auto info = [](const PromptSet& set, size_t i, RequestId id) {
    return RequestInfo{id, set.Prompt(i), set.group[i]};
  };
  // History: every group's prefix has been served once.
  RequestId next_id = 0;
  for (size_t i = 0; i < history.size(); ++i) selector->OnArrival(info(history, i, next_id++));
  selector->BeginRound();
  std::vector<RequestId> admitted;
  while (auto c = selector->Next()) {
    selector->Admit(c->id);
    admitted.push_back(c->id);
  }
  for (RequestId id : admitted) selector->OnFinish(id);
  for (size_t i = 0; i < queue.size(); ++i) selector->OnArrival(info(queue, i, next_id++));

  RoundResult result;
  const auto start = Clock::now();
  selector->BeginRound();
  while (result.admitted < o.max_batch) {
    const auto c = selector->Next();
    if (!c) break;
    selector->Admit(c->id);
    ++result.admitted;
  }
  result.round_ns = static_cast<uint64_t>((Clock::now() - start).count());
  return result;
}

}  // namespace

nlohmann::json RunSchedOverheadBenchmark(const SchedOverheadOptions& o) {
  nlohmann::json rows = nlohmann::json::array();
  // Per prefix length: every selector's ratio to CHT at the largest waiting size.
  nlohmann::json ratios = nlohmann::json::object();
  const uint32_t largest_queue = *std::max_element(o.waiting.begin(), o.waiting.end());
  const uint32_t reps = std::max(1u, o.repetitions);
  const size_t count = o.selectors.size();
  const auto cht_it = std::find(o.selectors.begin(), o.selectors.end(), "cht");
  const size_t cht = static_cast<size_t>(cht_it - o.selectors.begin());
  for (uint32_t prefix : o.prefix_tokens) {
    const PromptSet history = MakeGroupedPrompts(o.groups, o.groups, prefix, o.suffix_tokens, o.seed);
    for (uint32_t waiting : o.waiting) {
      // Same groups (same seed => same prefix segments), new suffixes.
      const PromptSet queue = MakeGroupedPrompts(waiting, o.groups, prefix, o.suffix_tokens, o.seed);
      // Repetitions interleave the selectors (in an order rotated every repetition), so each
      // repetition's ratios compare rounds taken seconds apart on the same machine state.
      std::vector<std::vector<uint64_t>> times(count);
      std::vector<uint32_t> admitted(count, 0);
      for (uint32_t rep = 0; rep < reps; ++rep) {
        for (size_t k = 0; k < count; ++k) {
          const size_t s = (k + rep) % count;
          const RoundResult r = TimeOneRound(o.selectors[s], history, queue, o);
          times[s].push_back(r.round_ns);
          admitted[s] = r.admitted;
        }
      }
      nlohmann::json entry = nlohmann::json::object();
      for (size_t s = 0; s < count; ++s) {
        std::vector<uint64_t> sorted = times[s];
        std::sort(sorted.begin(), sorted.end());
        nlohmann::json row = {{"selector", o.selectors[s]},
                              {"prefix_tokens", prefix},
                              {"waiting", waiting},
                              {"round_ns", sorted[sorted.size() / 2]},
                              {"min_round_ns", sorted.front()},
                              {"max_round_ns", sorted.back()},
                              {"admitted", admitted[s]},
                              {"repetitions", sorted.size()}};
        if (cht != count && s != cht) {
          // Per-repetition ratio to CHT's round of the same repetition: median and spread.
          std::vector<double> ratio;
          for (uint32_t rep = 0; rep < reps; ++rep) {
            ratio.push_back(static_cast<double>(times[s][rep]) /
                            static_cast<double>(std::max<uint64_t>(1, times[cht][rep])));
          }
          std::sort(ratio.begin(), ratio.end());
          const double median = ratio[ratio.size() / 2];
          row["over_cht"] = median;
          row["over_cht_min"] = ratio.front();
          row["over_cht_max"] = ratio.back();
          entry[o.selectors[s] + "_over_cht"] = median;
          entry[o.selectors[s] + "_over_cht_spread"] = {ratio.front(), ratio.back()};
        }
        rows.push_back(std::move(row));
      }
      if (waiting == largest_queue && !entry.empty()) ratios[std::to_string(prefix)] = entry;
    }
  }
  return {{"rows", rows},
          {"ratios_at_waiting_" + std::to_string(largest_queue), ratios},
          {"setup",
           {{"groups", o.groups},
            {"suffix_tokens", o.suffix_tokens},
            {"max_batch", o.max_batch},
            {"history", "one finished request per group before the timed round"},
            {"seed", o.seed}}},
          {"provenance", ToJson(ReadHostInfo())}};
}

}  // namespace feather
