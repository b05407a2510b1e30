// sglang_prefill_adder.h: SGLang 0.5.6's rule for which waiting requests join the next prefill
// (extend) batch, as a function of the engine's state: the admission half of
// `serving.engine: sglang` (issue 16 item 3).
//
// Why it matters. vLLM admits a waiting request when its blocks fit in the free pool now
// (plus, since 0.32, its whole known sequence). SGLang instead reserves room for the *future*
// decode tokens of every running request, estimated as new_token_ratio x remaining output, and
// admits a new request only if its input plus its own clipped output estimate fit in what is
// left. Long outputs therefore shrink SGLang's prefill batches, which is what the paper
// reports for LPM and DFS-weight (both ran on SGLang).
//
// The rules, each from SGLang 0.5.6 (python/sglang/srt/managers/):
// - schedule_policy.py, PrefillAdder.__init__ / _get_running_request_total_token_offset:
//   rem_total_token_offset starts at sum over running requests of
//   min(max_new_tokens - len(output_ids), CLIP_MAX_NEW_TOKENS) * new_token_ratio.
//   CLIP_MAX_NEW_TOKENS = 4096 (env SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION).
// - PrefillAdder.rem_total_tokens: (free KV tokens + evictable radix-cache tokens) - offset;
//   cur_rem_tokens: the same less only the inputs admitted this round.
// - PrefillAdder.add_one_req (the path without ignore_eos; host/hierarchical cache off):
//   total_tokens = extend_input_len + min(max(max_new_tokens - len(output_ids), 0), CLIP);
//   refuse with NO_TOKEN if total_tokens >= rem_total_tokens; refuse with OTHER if the
//   page-rounded extend_input_len >= rem_input_tokens and the batch already has a request.
//   extend_input_len is the prompt *less its radix-cache prefix hit*: cached prefix tokens
//   count against neither the input budget nor the total budget.
//   If the rounded input fits the chunk budget (rem_chunk_tokens, = chunked_prefill_size) the
//   request is admitted whole, else truncated to rem_chunk_tokens rounded down to a page and
//   becomes the chunked request (refused with OTHER if that is <= 0).
// - PrefillAdder._update_prefill_budget: an admitted request adds its rounded input plus its
//   clipped max_new_tokens to the total offset (a truncated chunk adds its input only), its
//   input to cur offset, and subtracts its input from rem_input_tokens and rem_chunk_tokens.
// - PrefillAdder.budget_state, returned after each admission: NO_TOKEN if rem_total_tokens or
//   cur_rem_tokens <= 0, OTHER if rem_input_tokens or rem_chunk_tokens <= 0, else CONTINUE.
// - scheduler.py, Scheduler.get_new_batch_prefill: walks the waiting queue in the policy's
//   order; stops when running + admitted reaches max_running_requests, and on the first
//   result that is not CONTINUE (the request that returned it stays admitted if it was added).
//   rem_input_tokens starts at max_prefill_tokens (server_args, default 16384).
// Not modelled here: ignore_eos requests with the radix cache disabled
// (add_one_req_ignore_eos), hierarchical-cache host hits, SWA/Mamba pools, LoRA limits,
// priority preemption, mixed chunked prefill (mixed_with_decode_tokens = 0).
//
// The serving loop (sim/serving/simulator_sglang.cc) calls it one request at a time through
// SglangPrefillAdder (below), which adds the _lock_node re-check of the prefix hit's evictable
// tokens (`locked_evictable_tokens`; the differential test passes none, as its mock cache has
// none) and add_chunked_req. sim/serving/sglang_batcher.h holds the rest of `serving.engine:
// sglang` (prefill-or-decode steps, new_token_ratio, retraction) with their citations.
// SglangPrefillAdmit is the same rule over a whole queue, for the tests that compare it with
// SGLang's class.
//
// Cost: O(1) per TryAdd; SglangPrefillAdmit O(running + waiting).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

namespace feather {

// One waiting request as PrefillAdder sees it.
struct SglangWaitingReq {
  int64_t extend_input_len = 0;  // prompt (+ output so far) less the radix-cache prefix hit
  int64_t max_new_tokens = 0;
  int64_t output_len = 0;  // > 0 only for a retracted request coming back
};

struct SglangAdderState {
  int64_t page_size = 1;
  double new_token_ratio = 0.7;            // the scheduler's current ratio
  int64_t available_tokens = 0;            // free KV tokens + evictable radix-cache tokens
  int64_t rem_input_tokens = 16384;        // max_prefill_tokens
  int64_t rem_chunk_tokens = 8192;         // chunked_prefill_size; < 0 = chunking disabled
  int64_t max_running_requests = 1 << 30;  // incl. the running batch
  int64_t clip_max_new_tokens = 4096;      // CLIP_MAX_NEW_TOKENS
};

struct SglangAdmission {
  std::vector<int> admitted;  // indices into the waiting span, in admission order
  int64_t chunked_len = -1;   // extend length of the last admitted one if it was truncated
};

// Why a request was refused, or the budget state after an admission (PrefillAdder's
// AddReqResult): kContinue admits more, kNoToken means the KV budget is spent (the scheduler then
// marks its running batch full), kOther any other budget (input, chunk, running requests).
enum class SglangAddResult : uint8_t { kContinue, kNoToken, kOther };

// PrefillAdder for one scheduling round, fed one request at a time in the policy's order.
class SglangPrefillAdder {
 public:
  // `reserved_decode_tokens` = ReservedDecodeTokens(...) of the running batch.
  SglangPrefillAdder(const SglangAdderState& s, double reserved_decode_tokens)
      : s_(s),
        total_offset_(reserved_decode_tokens),
        rem_input_(s.rem_input_tokens),
        rem_chunk_(s.rem_chunk_tokens) {}

  // rem_total_token_offset's start: Σ min(remaining output, clip) × new_token_ratio.
  [[nodiscard]] static double ReservedDecodeTokens(std::span<const int64_t> running_remaining,
                                                   double new_token_ratio, int64_t clip) {
    double offset = 0;
    for (const int64_t rem : running_remaining) offset += ReservedFor(rem, new_token_ratio, clip);
    return offset;
  }
  [[nodiscard]] static double ReservedFor(int64_t remaining, double new_token_ratio, int64_t clip) {
    return static_cast<double>(std::min(remaining, clip)) * new_token_ratio;
  }

  // add_chunked_req: the unfinished chunked request of the last round comes first and takes
  // min(rem_chunk_tokens, rem_total_tokens) of its remaining `extend_len`. Returns the tokens
  // it extends this round (<= 0: nothing fits; SGLang would pass a non-positive length on).
  int64_t AddChunked(int64_t extend_len, int64_t max_new_tokens) {
    const auto cap = static_cast<int64_t>(std::min(
        static_cast<double>(chunking() ? rem_chunk_ : extend_len), std::floor(RemTotal())));
    const bool truncated = extend_len > cap;
    const int64_t n = std::min(extend_len, cap);
    if (n <= 0) return n;
    ++admitted_;
    Update(n, truncated ? 0 : std::min(max_new_tokens, s_.clip_max_new_tokens));
    return n;
  }

  struct Outcome {
    bool admitted = false;
    int64_t extend_tokens = 0;  // this round's extend length (< r.extend_input_len: chunked)
    SglangAddResult result = SglangAddResult::kContinue;  // stop the round unless kContinue
  };
  // add_one_req for the next request of the queue. `locked_evictable_tokens`: tokens of its
  // prefix hit that are evictable now (unreferenced cached blocks): _lock_node takes them out
  // of the evictable pool while the request is checked, so they count against it.
  Outcome TryAdd(const SglangWaitingReq& r, int64_t locked_evictable_tokens = 0) {
    const int64_t out_left =
        std::min(std::max<int64_t>(r.max_new_tokens - r.output_len, 0), s_.clip_max_new_tokens);
    const int64_t total_tokens = r.extend_input_len + out_left;
    if (static_cast<double>(total_tokens) >= RemTotal())
      return {false, 0, SglangAddResult::kNoToken};
    const int64_t input = CeilPaged(r.extend_input_len);
    if (input >= rem_input_ && admitted_ > 0) return {false, 0, SglangAddResult::kOther};
    if (static_cast<double>(total_tokens) >=
        RemTotal() - static_cast<double>(locked_evictable_tokens)) {
      return {false, 0, SglangAddResult::kNoToken};
    }
    Outcome out{true, r.extend_input_len, SglangAddResult::kContinue};
    if (!chunking() || input <= rem_chunk_) {
      Update(input, std::min(r.max_new_tokens, s_.clip_max_new_tokens));
    } else {
      const int64_t trunc = rem_chunk_ / s_.page_size * s_.page_size;
      if (trunc <= 0) return {false, 0, SglangAddResult::kOther};
      out.extend_tokens = trunc;
      Update(trunc, 0);
    }
    ++admitted_;
    out.result = BudgetState();
    return out;
  }

  // budget_state(): NO_TOKEN, OTHER or CONTINUE after the admissions so far.
  [[nodiscard]] SglangAddResult BudgetState() const {
    if (RemTotal() <= 0 || s_.available_tokens - cur_offset_ <= 0) return SglangAddResult::kNoToken;
    if (rem_input_ <= 0 || (chunking() && rem_chunk_ <= 0)) return SglangAddResult::kOther;
    return SglangAddResult::kContinue;
  }
  [[nodiscard]] int64_t admitted() const { return admitted_; }

 private:
  [[nodiscard]] bool chunking() const { return s_.rem_chunk_tokens >= 0; }
  [[nodiscard]] int64_t CeilPaged(int64_t t) const {
    return (t + s_.page_size - 1) / s_.page_size * s_.page_size;
  }
  // rem_total_tokens: available + evictable tokens less the offset (a float in SGLang).
  [[nodiscard]] double RemTotal() const {
    return static_cast<double>(s_.available_tokens) - total_offset_;
  }
  // _update_prefill_budget.
  void Update(int64_t input, int64_t max_new) {
    input = CeilPaged(input);
    total_offset_ += static_cast<double>(input + max_new);
    cur_offset_ += input;
    rem_input_ -= input;
    if (chunking()) rem_chunk_ -= input;
  }

  SglangAdderState s_;
  double total_offset_ = 0;
  int64_t cur_offset_ = 0;
  int64_t rem_input_ = 0;
  int64_t rem_chunk_ = 0;
  int64_t admitted_ = 0;
};

// The whole round over a queue in the policy's order (get_new_batch_prefill's loop, with no
// chunked request carried over). `running_remaining[i]` = max_new_tokens - len(output_ids) of
// running request i.
inline SglangAdmission SglangPrefillAdmit(const SglangAdderState& s,
                                          std::span<const int64_t> running_remaining,
                                          std::span<const SglangWaitingReq> waiting) {
  SglangPrefillAdder adder(s, SglangPrefillAdder::ReservedDecodeTokens(
                                  running_remaining, s.new_token_ratio, s.clip_max_new_tokens));
  SglangAdmission out;
  const auto running = static_cast<int64_t>(running_remaining.size());
  for (int i = 0; i < static_cast<int>(waiting.size()); ++i) {
    if (running + static_cast<int64_t>(out.admitted.size()) >= s.max_running_requests) break;
    const SglangPrefillAdder::Outcome o = adder.TryAdd(waiting[i]);
    if (o.admitted) {
      out.admitted.push_back(i);
      if (o.extend_tokens < waiting[i].extend_input_len) out.chunked_len = o.extend_tokens;
    }
    if (o.result != SglangAddResult::kContinue) break;
  }
  return out;
}

}  // namespace feather
