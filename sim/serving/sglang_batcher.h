// sglang_batcher.h: SGLang 0.5.6's batch formation, the state the serving loop keeps when a
// scenario says `serving.engine: sglang` (issue 16 item 3). The paper ran its LPM, DFS-weight
// and SGLang-FCFS baselines on SGLang, whose scheduler forms batches unlike vLLM's: with it those
// baselines run the smaller batches the paper reports, shrinking as outputs grow longer.
//
// vLLM v1 (the default, `serving.engine: vllm`) forms one mixed step from the running batch's
// decode tokens and new prompts' chunks within one token budget, and admits a prompt when its
// blocks fit now. SGLang instead
//   1. runs each step either as a prefill (extend) batch of newly admitted requests or as a
//      decode step of the whole running batch, never both (scheduler.py,
//      Scheduler.get_next_batch_to_run: "Run prefill first if possible"; mixing is
//      enable_mixed_chunk, False by default in server_args.py). A prefill step is formed
//      whenever the waiting queue admits one request, so a steady stream of arrivals delays
//      decodes;
//   2. admits a waiting request only if its uncached input plus its whole (clipped) output fit
//      in the KV pool after reserving new_token_ratio x the remaining output of every running
//      request (PrefillAdder, sglang_prefill_adder.h, which cites each budget). Long outputs
//      reserve more, so fewer requests join each prefill: the paper's shrinking batches;
//   3. learns new_token_ratio: it starts at SGLANG_INIT_NEW_TOKEN_RATIO 0.7 (times
//      schedule_conservativeness 1.0, capped at 1), falls by (init - min) /
//      SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS 600 on every decode step that needs no retraction, down
//      to min = init x SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR 0.14 (scheduler.py, Scheduler.__init__
//      and update_running_batch);
//   4. when a decode step's tokens do not fit (ScheduleBatch.check_decode_mem), retracts running
//      requests back to the waiting queue, their output kept (ScheduleBatch.retract_decode): the
//      batch is sorted by (len(output_ids), -len(origin_input_ids)) descending and victims are
//      popped from the end, so the request with the fewest output tokens goes first, the longer
//      prompt first among equals; at least one is retracted, and retraction goes on until the
//      kept ones' next decode fits (one request always stays). Then new_token_ratio =
//      min(1, (Σ len(output_ids) + SGLANG_RETRACT_DECODE_STEPS 20 x kept) / (Σ max_new_tokens
//      + 1)) over the kept requests. A retracted request's KV is released without inserting its
//      output into the radix tree (release_req), so it comes back with its prompt's hit only;
//   5. marks the running batch full (batch_is_full) when a round stops on the KV budget
//      (NO_TOKEN) or on max_running_requests, and tries no prefill again until the batch shrinks
//      (a request finishes or is retracted: update_running_batch), unless a chunked request is
//      in flight: the chunked request of the last round is always continued first
//      (get_new_batch_prefill, PrefillAdder.add_chunked_req), so no decode step runs until its
//      prefill is done.
// Limits (server_args.py): max_prefill_tokens 16384 (PrefillAdder's input budget);
// chunked_prefill_size by GPU memory when not given (ServerArgs._handle_gpu_memory_settings:
// < 35 GiB 2048, < 60 GiB 4096, < 160 GiB 8192, else 16384; ChunkedPrefillSizeFor below);
// max_running_requests is the scenario's serving.max_num_seqs (the paper's max batch, 500).
//
// What feather reuses and where it differs from SGLang:
// - The prefix hit is feather's paged KV cache with vLLM's block hashes (sim/kv/kv_cache.h), not
//   SGLang's token radix tree: hits are whole blocks of serving.block_tokens (SGLang's page size
//   is 1 token with its default attention backends, so it also hits a partial block), and
//   eviction takes the least recently freed block first, deepest block of a request first,
//   where SGLang evicts the least recently used unlocked radix leaf. The adder's budgets count
//   tokens with page_size 1 as SGLang's default does; the KV pool allocates whole blocks, so an
//   admission the adder allowed can still fail to allocate (at most block_tokens - 1 tokens per
//   request short), which ends the round like NO_TOKEN.
// - Free and evictable tokens are the free queue's blocks (empty or cached), as
//   token_to_kv_pool_allocator.available_size() + tree_cache.evictable_size().
// - Cascade attention: SGLang has no vLLM-style all-or-nothing cascade path, so the run turns
//   serving.cascade_attention off under sglang (sim/io/scenario_run.cc); the cost model's L2
//   reuse term for shared blocks read by several requests of a decode step stays.
// - Overlap scheduling (SGLang forms the next batch while the GPU runs the current one) and the
//   scheduler's CPU time are not modelled here; `scheduler_time` charges CPU time as for vLLM.
// - The waiting queue is the selector's: a retracted request goes back through OnPreempt, which
//   FCFS puts at the front (vLLM's choice) where SGLang appends it; LPM and DFS-weight re-rank
//   every round anyway.
// - A stop policy is still asked about each admission (for `scheduler.stop` other than always),
//   with the batch size, waiting count and KV fill; the batch-shape fields stay empty.
//
// Cost: O(1) per call except RetractionOrder, O(R log R) for R running requests.
#pragma once

#include <cstdint>
#include <span>

#include "base/types.h"

namespace feather {

// SGLang's constants and limits (server_args.py and environment defaults of 0.5.6).
struct SglangConfig {
  uint32_t max_prefill_tokens = 16384;
  int64_t chunked_prefill_size = 0;  // 0 = ChunkedPrefillSizeFor(device memory); -1 = off
  double init_new_token_ratio = 0.7;
  double min_new_token_ratio_factor = 0.14;
  uint32_t new_token_ratio_decay_steps = 600;
  uint32_t retract_decode_steps = 20;
  int64_t clip_max_new_tokens = 4096;
};

// server_args.py, ServerArgs._handle_gpu_memory_settings: chunked_prefill_size for a GPU of
// `memory_bytes` (its total memory in MiB against 20/35/60/90/160 GiB thresholds).
[[nodiscard]] int64_t ChunkedPrefillSizeFor(double memory_bytes);

// One running request as retract_decode sorts it.
struct SglangRetractCandidate {
  RequestId id = kNoRequest;
  uint32_t output_tokens = 0;  // len(output_ids)
  uint32_t prompt_tokens = 0;  // len(origin_input_ids)
};

class SglangBatcher {
 public:
  explicit SglangBatcher(const SglangConfig& config);

  [[nodiscard]] const SglangConfig& config() const { return config_; }
  [[nodiscard]] double new_token_ratio() const { return ratio_; }
  [[nodiscard]] double min_new_token_ratio() const { return min_ratio_; }

  // A decode step ran without retraction: the ratio decays one step toward its floor.
  void OnDecodeWithoutRetraction();
  // After a retraction: the ratio from the kept requests' decoded tokens and output targets.
  void OnRetraction(uint64_t kept, uint64_t kept_output_tokens, uint64_t kept_max_new_tokens);
  // Sorts `batch` so that retract_decode's victims are taken from its back.
  static void RetractionOrder(std::span<SglangRetractCandidate> batch);

  // batch_is_full: no prefill is tried until the running batch shrinks.
  [[nodiscard]] bool batch_is_full() const { return batch_is_full_; }
  void set_batch_is_full(bool full) { batch_is_full_ = full; }
  // The request whose prefill is split over rounds (PrefillAdder's chunked request), if any.
  [[nodiscard]] RequestId chunked() const { return chunked_; }
  void set_chunked(RequestId id) { chunked_ = id; }

 private:
  SglangConfig config_;
  double ratio_ = 0;
  double min_ratio_ = 0;
  double decay_ = 0;
  bool batch_is_full_ = false;
  RequestId chunked_ = kNoRequest;
};

}  // namespace feather
