// sglang_prefill_adder.h: SGLang 0.5.6's rule for which waiting requests join the next prefill
// (extend) batch, as a pure function of the engine's state. The first piece of
// `serving.engine: sglang` (issue 16 item 3); the serving loop does not call it yet.
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
// The rest of `serving.engine: sglang`, read from the same release and NOT yet in the serving
// loop (sim/serving/simulator.cc still forms vLLM-style mixed batches for every policy):
// - scheduler.py, Scheduler.get_next_batch_to_run: each step runs a prefill (extend) batch if
//   get_new_batch_prefill formed one, else a decode step of the whole running batch; the two
//   are not mixed (enable_mixed_chunk defaults to False in server_args.py).
// - scheduler.py, Scheduler.__init__: new_token_ratio starts at
//   min(SGLANG_INIT_NEW_TOKEN_RATIO 0.7 x schedule_conservativeness 1.0, 1); its floor is
//   init x SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR 0.14; Scheduler.update_running_batch lowers it by
//   (init - min) / SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS 600 on every decode step that needs no
//   retraction.
// - schedule_batch.py, ScheduleBatch.retract_decode: when check_decode_mem fails, requests are
//   retracted (back to the waiting queue, output kept) in order of most output, then shortest
//   prompt, until the rest fit; new_token_ratio becomes min(1, (decoded tokens of the kept +
//   SGLANG_RETRACT_DECODE_STEPS 20 x kept) / (sum of their max_new_tokens + 1)).
// - server_args.py: max_prefill_tokens 16384; chunked_prefill_size set per GPU memory when None.
#pragma once

#include <algorithm>
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

// `running_remaining[i]` = max_new_tokens - len(output_ids) of running request i.
inline SglangAdmission SglangPrefillAdmit(const SglangAdderState& s,
                                          std::span<const int64_t> running_remaining,
                                          std::span<const SglangWaitingReq> waiting) {
  const auto ceil_paged = [&](int64_t t) { return (t + s.page_size - 1) / s.page_size * s.page_size; };
  double total_offset = 0;  // rem_total_token_offset (float in SGLang: ratio multiplies it)
  for (int64_t rem : running_remaining) {
    total_offset += static_cast<double>(std::min(rem, s.clip_max_new_tokens)) * s.new_token_ratio;
  }
  int64_t cur_offset = 0;
  int64_t rem_input = s.rem_input_tokens;
  int64_t rem_chunk = s.rem_chunk_tokens;
  const bool chunking = s.rem_chunk_tokens >= 0;
  const auto rem_total = [&] { return static_cast<double>(s.available_tokens) - total_offset; };
  SglangAdmission out;
  const auto running = static_cast<int64_t>(running_remaining.size());
  for (int i = 0; i < static_cast<int>(waiting.size()); ++i) {
    if (running + static_cast<int64_t>(out.admitted.size()) >= s.max_running_requests) break;
    const SglangWaitingReq& r = waiting[i];
    const int64_t out_left =
        std::min(std::max<int64_t>(r.max_new_tokens - r.output_len, 0), s.clip_max_new_tokens);
    const int64_t total_tokens = r.extend_input_len + out_left;
    if (static_cast<double>(total_tokens) >= rem_total()) break;  // NO_TOKEN
    const int64_t input = ceil_paged(r.extend_input_len);
    if (input >= rem_input && !out.admitted.empty()) break;  // OTHER
    const int64_t clipped_new = std::min(r.max_new_tokens, s.clip_max_new_tokens);
    if (!chunking || input <= rem_chunk) {
      out.admitted.push_back(i);
      total_offset += static_cast<double>(input + clipped_new);
      cur_offset += input;
      rem_input -= input;
      if (chunking) rem_chunk -= input;
    } else {
      const int64_t trunc = rem_chunk / s.page_size * s.page_size;
      if (trunc <= 0) break;  // OTHER
      out.admitted.push_back(i);
      out.chunked_len = trunc;
      total_offset += static_cast<double>(trunc);
      cur_offset += trunc;
      rem_input -= trunc;
      rem_chunk -= trunc;
    }
    // budget_state()
    if (rem_total() <= 0 || s.available_tokens - cur_offset <= 0) break;
    if (rem_input <= 0 || (chunking && rem_chunk <= 0)) break;
  }
  return out;
}

}  // namespace feather
