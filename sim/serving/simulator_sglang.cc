// simulator_sglang.cc: the serving loop's steps 2-3 under `serving.engine: sglang`, SGLang
// 0.5.6's batch formation (the rules and their sources are in sglang_batcher.h).
#include <algorithm>

#include "base/check.h"
#include "sim/serving/sglang_prefill_adder.h"
#include "sim/serving/simulator.h"

namespace feather {

uint32_t Simulator::DecodeBlocksNeeded(RequestId id) const {
  const uint64_t tokens = uint64_t{state_[id].computed_tokens} + 1;
  const uint64_t blocks = (tokens + config_.block_tokens - 1) / config_.block_tokens;
  return blocks > kv_.BlockTable(id).size() ? 1 : 0;
}

bool Simulator::ScheduleSglang(bool& ranked) {
  ranked = false;
  for (const RequestId id : running_) state_[id].new_tokens = 0;
  const RequestId chunked = sglang_.chunked();
  const size_t decoding = running_.size() - (chunked != kNoRequest ? 1 : 0);
  // get_new_batch_prefill runs when a chunked request is in flight, or requests wait and the
  // running batch is not marked full. An empty batch is never full here (SGLang clears the mark
  // when its batch empties).
  const bool try_prefill =
      chunked != kNoRequest ||
      (selector_.NumWaiting() > 0 && (!sglang_.batch_is_full() || running_.empty()));
  if (try_prefill) {
    if (chunked == kNoRequest && decoding >= config_.max_num_seqs) {
      sglang_.set_batch_is_full(true);  // get_num_allocatable_reqs <= 0
    } else {
      ranked = selector_.NumWaiting() > 0;
      if (AdmitSglang(decoding) > 0) return false;  // a prefill step
    }
  }
  if (decoding == 0) {
    FEATHER_CHECK(running_.empty(), "sglang: a chunked prefill could not continue alone");
    return false;
  }
  return DecodeSglang();
}

uint32_t Simulator::AdmitSglang(size_t decoding) {
  Timed([&] {
    selector_.BeginRound();
    policy_.BeginRound();
  });
  const uint32_t block = config_.block_tokens;
  const SglangConfig& sc = sglang_.config();
  const RequestId chunked = sglang_.chunked();
  const double ratio = sglang_.new_token_ratio();
  // rem_total_token_offset's start: the running batch's future decode tokens (the chunked
  // request is not in SGLang's running batch).
  double reserved = 0;
  for (const RequestId id : running_) {
    if (id == chunked) continue;
    const RequestState& s = state_[id];
    reserved += SglangPrefillAdder::ReservedFor(int64_t{s.output_target} - s.generated, ratio,
                                                sc.clip_max_new_tokens);
  }
  SglangAdderState state;
  state.page_size = 1;  // SGLang's default page size (see sglang_batcher.h on block rounding)
  state.new_token_ratio = ratio;
  state.available_tokens = static_cast<int64_t>(kv_.NumFreeBlocks() * block);
  state.rem_input_tokens = sc.max_prefill_tokens;
  state.rem_chunk_tokens = config_.chunked_prefill ? sc.chunked_prefill_size : -1;
  state.max_running_requests = config_.max_num_seqs;
  state.clip_max_new_tokens = sc.clip_max_new_tokens;
  SglangPrefillAdder adder(state, reserved);

  uint32_t prefill_requests = 0;
  if (chunked != kNoRequest) {
    RequestState& s = state_[chunked];
    const uint32_t left = s.SequenceTokens() - s.computed_tokens;
    const int64_t n = adder.AddChunked(left, s.output_target);
    if (n > 0 && kv_.Allocate(chunked, ChainOf(chunked), s.SequenceTokens(),
                              s.computed_tokens + static_cast<uint32_t>(n))) {
      RegisterScheduledBlocks(chunked, static_cast<uint32_t>(n));
      s.new_tokens = static_cast<uint32_t>(n);
      ++prefill_requests;
      if (n == left) sglang_.set_chunked(kNoRequest);
    }
  }
  while (true) {
    const std::optional<Candidate> candidate = Timed([&] { return selector_.Next(); });
    if (!candidate) break;
    // Checked per waiting request, as get_new_batch_prefill's loop does (an exhausted queue
    // leaves the batch unmarked).
    if (decoding + prefill_requests >= config_.max_num_seqs) {
      sglang_.set_batch_is_full(true);
      break;
    }
    const RequestId id = candidate->id;
    RequestState& s = state_[id];
    const uint32_t sequence = s.SequenceTokens();
    const ChainView chain = ChainOf(id);
    const uint32_t cached = kv_.LookupCachedTokens(chain, sequence);
    const uint32_t need = sequence - cached;
    {
      const StopContext context = BaseStopContext(*candidate, sequence);
      const StopDecision decision = Timed([&] { return policy_.Decide(context); });
      // kSkip as kStop: SGLang's loop walks its ranked queue once and has no skipping selector.
      if (decision != StopDecision::kAdd && !running_.empty()) break;
    }
    // The hit's blocks nobody references are evictable now; locking them for the check takes
    // them out of the pool (PrefillAdder._lock_node).
    int64_t locked_evictable = 0;
    for (uint32_t b = 0; b < cached / block; ++b) {
      if (kv_.RefCount(kv_.FindCachedBlock(chain[b])) == 0) locked_evictable += block;
    }
    SglangPrefillAdder::Outcome outcome =
        adder.TryAdd(SglangWaitingReq{need, s.output_target, s.generated}, locked_evictable);
    if (!outcome.admitted) {
      if (!running_.empty() || prefill_requests > 0) {
        if (outcome.result == SglangAddResult::kNoToken) sglang_.set_batch_is_full(true);
        break;
      }
      // Nothing runs and nothing else could free memory: SGLang would wait forever on a request
      // at the pool's very edge; feather admits it (it fits the cache: UnservableOnArrival).
      const bool chunk = state.rem_chunk_tokens >= 0 && need > state.rem_chunk_tokens;
      outcome.extend_tokens = chunk ? state.rem_chunk_tokens : need;
    }
    const auto n = static_cast<uint32_t>(outcome.extend_tokens);
    if (!kv_.Allocate(id, chain, sequence, cached + n)) {
      sglang_.set_batch_is_full(true);  // block rounding left the pool short (see header)
      break;
    }
    Timed([&] { selector_.Admit(id); });
    CountWaiting(id, -1);  // balanced, although the policy reads no shape here
    if (records_.requests[id].preemptions == 0) admitted_prompt_tokens_ += s.prompt_tokens;
    s.phase = Phase::kRunning;
    s.computed_tokens = kv_.CachedTokens(id);
    s.cached_blocks = s.computed_tokens / block;
    RegisterScheduledBlocks(id, n);
    s.new_tokens = n;
    records_.requests[id].cached_tokens = s.computed_tokens;
    running_.push_back(id);
    ++admitted_this_step_;
    ++prefill_requests;
    if (n < need) sglang_.set_chunked(id);
    if (outcome.result != SglangAddResult::kContinue) {
      if (outcome.result == SglangAddResult::kNoToken) sglang_.set_batch_is_full(true);
      break;
    }
  }
  return prefill_requests;
}

bool Simulator::DecodeSglang() {
  const RequestId chunked = sglang_.chunked();
  uint64_t needed = 0;
  for (const RequestId id : running_) {
    if (id != chunked) needed += DecodeBlocksNeeded(id);
  }
  const bool retract = needed > kv_.NumFreeBlocks();
  if (retract) {
    retract_scratch_.clear();
    for (const RequestId id : running_) {
      if (id == chunked) continue;
      retract_scratch_.push_back({id, state_[id].generated, state_[id].prompt_tokens});
    }
    SglangBatcher::RetractionOrder(retract_scratch_);
    bool first = true;
    while (retract_scratch_.size() > 1 && (first || needed > kv_.NumFreeBlocks())) {
      first = false;
      const RequestId victim = retract_scratch_.back().id;
      retract_scratch_.pop_back();
      needed -= DecodeBlocksNeeded(victim);
      Preempt(victim);
    }
    if (needed > kv_.NumFreeBlocks() && sglang_.chunked() != kNoRequest) {
      // One request left and still short: the chunked prefill holds the rest (SGLang aborts a
      // request here); feather sends the chunked request back to wait instead.
      Preempt(sglang_.chunked());
      sglang_.set_chunked(kNoRequest);
    }
    uint64_t kept_output = 0;
    uint64_t kept_max_new = 0;
    for (const SglangRetractCandidate& c : retract_scratch_) {
      kept_output += c.output_tokens;
      kept_max_new += state_[c.id].output_target;
    }
    sglang_.OnRetraction(retract_scratch_.size(), kept_output, kept_max_new);
  } else {
    sglang_.OnDecodeWithoutRetraction();
  }
  for (const RequestId id : running_) {
    if (id == sglang_.chunked()) continue;
    RequestState& s = state_[id];
    FEATHER_DCHECK(s.SequenceTokens() - s.computed_tokens == 1, "a running request decodes");
    const bool allocated = kv_.Allocate(id, ChainOf(id), s.SequenceTokens(), s.computed_tokens + 1);
    FEATHER_CHECK(allocated, "a decode step must fit after retraction");
    RegisterScheduledBlocks(id, 1);
    s.new_tokens = 1;
  }
  return retract;
}

}  // namespace feather
