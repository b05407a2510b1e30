// selector.h: the candidate-selector interface every scheduler baseline implements.
//
// A scheduler is a candidate selector (which waiting request should join the batch next) plus a
// stop policy (admit it, or dispatch the batch). The serving loop drives a selector like this:
//
//   selector.OnArrival(request)            // whenever a request enters the waiting queue
//   selector.BeginRound()                  // once per batch formation
//   while (auto c = selector.Next()) {     // propose; Next() is idempotent until Admit()
//     if (stop_policy says stop) break;
//     selector.Admit(c->id);               // the proposal joins the running set
//   }
//   selector.OnFinish(id)                  // a running request completed
//   selector.OnPreempt(id)                 // a running request is sent back to waiting
//   selector.OnCancel(id)                  // a waiting request left before being admitted
//
// Selectors that rank the whole queue once per round (SGLang's LPM and DFS-weight) do that work
// in BeginRound(); incremental ones (CHT, FCFS) keep their order up to date on every event.
// Each implementation states its per-round complexity in its own header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "base/prompt_view.h"
#include "base/types.h"

namespace feather {

inline constexpr uint32_t kNoPrefixGroup = 0xffffffffu;

// What a selector may know about a request. The prompt is a view (base/prompt_view.h): the
// shared head the workload stores once per distinct prefix, then the request's own tail. Its
// storage stays valid until the request finishes or is cancelled (the simulator borrows it from
// the workload for the whole run). Selectors that hash the prompt once (CHT, block table) read
// the view on arrival; the radix selectors (LPM, DFS-weight), which match every waiting prompt
// every round, keep a contiguous copy of a request's prompt only while it is waiting or running
// (lpm_selector.h says why).
struct RequestInfo {
  RequestId id = kNoRequest;
  PromptView prompt_tokens;
  uint32_t prefix_group = kNoPrefixGroup;  // only the Oracle selector reads it
};

// The prefix signal the CHT computes with each proposal (paper's FindBest): the depth of the
// batch-wide shared prefix tip before and after admitting the candidate, in chunks, and how many
// waiting requests (the candidate included) share the candidate's prefix at the new depth.
struct PrefixSignal {
  uint32_t tip_before_chunks = 0;
  uint32_t tip_after_chunks = 0;
  uint32_t peers = 0;
  uint32_t chunk_tokens = 0;
  [[nodiscard]] uint32_t TipLossChunks() const { return tip_before_chunks - tip_after_chunks; }
};

// What a selector's last BeginRound() ranked, for `scheduler_time: engine`
// (sim/serving/engine_cost.h prices SGLang's ranking by it): the waiting requests' prompt tokens
// and the radix tree's nodes when the round began. Selectors that rank nothing report zeros.
struct RoundWork {
  uint64_t waiting_tokens = 0;
  uint64_t tree_nodes = 0;
};

struct Candidate {
  RequestId id = kNoRequest;
  std::optional<PrefixSignal> signal;  // present only for selectors that compute it
};

class CandidateSelector {
 public:
  virtual ~CandidateSelector() = default;

  [[nodiscard]] virtual std::string_view Name() const = 0;

  virtual void OnArrival(const RequestInfo& request) = 0;
  virtual void BeginRound() = 0;
  // The next request to propose for the batch being formed, or nullopt when nothing is waiting
  // (or the selector's order for this round is exhausted). Calling it twice without Admit()
  // returns the same proposal.
  [[nodiscard]] virtual std::optional<Candidate> Next() = 0;
  // Precondition: `id` is the request the last Next() proposed.
  virtual void Admit(RequestId id) = 0;
  // Passes over the last proposal for the rest of this round (StopDecision::kSkip): Next() then
  // proposes another request, and the skipped one is proposed again from the next BeginRound();
  // it still counts in NumWaiting(). Returns false, changing nothing, where the selector cannot
  // skip (the serving loop then ends the round). Precondition: as for Admit.
  virtual bool Skip(RequestId id) {
    (void)id;
    return false;
  }
  virtual void OnFinish(RequestId id) = 0;
  virtual void OnPreempt(RequestId id) = 0;
  virtual void OnCancel(RequestId id) = 0;
  // The engine's prefix cache evicted a block that finished request `id` released last (its
  // KV is no longer whole in the cache). Only for selectors whose WantsCacheEvictions() is true.
  [[nodiscard]] virtual bool WantsCacheEvictions() const { return false; }
  virtual void OnCacheEvicted(RequestId id) { (void)id; }

  [[nodiscard]] virtual size_t NumWaiting() const = 0;
  [[nodiscard]] virtual RoundWork LastRoundWork() const { return {}; }
  // Bytes of selector state, for memory reports.
  [[nodiscard]] virtual size_t MemoryBytes() const = 0;
};

}  // namespace feather
