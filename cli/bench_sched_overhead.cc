// bench_sched_overhead.cc: CPU time of one scheduling round per selector (see the header).
//
// The state before the timed round is a server with history: one request of every prefix group
// has already run and finished (so radix caches and block tables hold every group's prefix, as
// on a warm server), then `waiting` requests queue up. The round is BeginRound() followed by
// Next()/Admit() until `max_batch` requests are admitted or the queue is empty; no stop policy,
// so every selector admits the same number of requests. Setup is untimed and rebuilt for every
// repetition; the row reports the median and minimum over repetitions.
#include "cli/bench_sched_overhead.h"

#include <algorithm>
#include <chrono>
#include <map>

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
  // Per prefix length: the round time of every selector at the largest waiting size, for ratios.
  std::map<uint32_t, std::map<std::string, uint64_t>> at_largest_queue;
  const uint32_t largest_queue = *std::max_element(o.waiting.begin(), o.waiting.end());
  for (uint32_t prefix : o.prefix_tokens) {
    const PromptSet history = MakeGroupedPrompts(o.groups, o.groups, prefix, o.suffix_tokens, o.seed);
    for (uint32_t waiting : o.waiting) {
      // Same groups (same seed => same prefix segments), new suffixes.
      const PromptSet queue = MakeGroupedPrompts(waiting, o.groups, prefix, o.suffix_tokens, o.seed);
      for (const std::string& name : o.selectors) {
        std::vector<uint64_t> times;
        uint32_t admitted = 0;
        for (uint32_t rep = 0; rep < std::max(1u, o.repetitions); ++rep) {
          const RoundResult r = TimeOneRound(name, history, queue, o);
          times.push_back(r.round_ns);
          admitted = r.admitted;
        }
        std::sort(times.begin(), times.end());
        const uint64_t median = times[times.size() / 2];
        rows.push_back({{"selector", name},
                        {"prefix_tokens", prefix},
                        {"waiting", waiting},
                        {"round_ns", median},
                        {"min_round_ns", times.front()},
                        {"admitted", admitted},
                        {"repetitions", times.size()}});
        if (waiting == largest_queue) at_largest_queue[prefix][name] = median;
      }
    }
  }
  nlohmann::json ratios = nlohmann::json::object();
  for (const auto& [prefix, by_name] : at_largest_queue) {
    const auto cht = by_name.find("cht");
    if (cht == by_name.end() || cht->second == 0) continue;
    nlohmann::json entry;
    for (const auto& [name, ns] : by_name) {
      entry[name + "_over_cht"] = static_cast<double>(ns) / static_cast<double>(cht->second);
    }
    ratios[std::to_string(prefix)] = entry;
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
