// simulator.cc: the serving loop (see simulator.h for the step structure and vLLM v1 rules).
#include "sim/serving/simulator.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <numeric>
#include <string>
#include <type_traits>

#include "base/check.h"
#include "policies/block_hash_table.h"

namespace feather {
namespace {

double NsToS(int64_t ns) { return static_cast<double>(ns) * 1e-9; }
double NsToMs(int64_t ns) { return static_cast<double>(ns) * 1e-6; }

// The q-quantile (0..1) of `values` by nearest rank; `values` is reordered.
double Quantile(std::vector<double>& values, double q) {
  if (values.empty()) return 0.0;
  const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(values.size())));
  const size_t index = std::min(values.size() - 1, rank == 0 ? 0 : rank - 1);
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(index),
                   values.end());
  return values[index];
}

// Quantile's value for the multiset of floats given as (bits -> count), `n` values in all: the
// value at the same rank, found by walking the distinct values in increasing order.
double QuantileOfCounts(const FlatHashMap<uint32_t, uint64_t>& counts, uint64_t n, double q) {
  const auto rank = static_cast<uint64_t>(std::ceil(q * static_cast<double>(n)));
  const uint64_t index = std::min(n - 1, rank == 0 ? 0 : rank - 1);
  std::vector<std::pair<float, uint64_t>> values;
  values.reserve(counts.size());
  counts.ForEach([&](uint32_t bits, uint64_t count) {
    values.emplace_back(std::bit_cast<float>(bits), count);
  });
  std::sort(values.begin(), values.end());
  uint64_t seen = 0;
  for (const auto& [value, count] : values) {
    seen += count;
    if (seen > index) return value;
  }
  return values.back().first;
}

uint64_t BlocksFor(uint64_t tokens, uint32_t block_tokens) {
  return (tokens + block_tokens - 1) / block_tokens;
}

// The overload verdict of RunSummary::overloaded (see its comment for the definition).
bool IsOverloaded(uint64_t requests, double arrival_span_s, bool reached_last_arrival,
                  uint64_t waiting_at_last_arrival, double drain_s) {
  if (requests < 2 || arrival_span_s <= 0 || !reached_last_arrival) return false;
  return static_cast<double>(waiting_at_last_arrival) >= 0.2 * static_cast<double>(requests) &&
         drain_s >= 0.2 * arrival_span_s;
}

}  // namespace

std::string DescribeUnservable(std::span<const UnservableRequest> unservable,
                               uint64_t total_requests) {
  if (unservable.empty()) return {};
  struct Group {
    uint64_t count = 0;
    uint64_t max_needed = 0;
    uint64_t limit = 0;
  };
  std::array<Group, kNumUnservableReasons> groups{};
  for (const UnservableRequest& u : unservable) {
    Group& g = groups[static_cast<size_t>(u.reason)];
    ++g.count;
    g.max_needed = std::max(g.max_needed, u.needed);
    g.limit = u.limit;
  }
  std::string line = std::to_string(unservable.size()) + " of " + std::to_string(total_requests) +
                     " requests can never be served and were rejected: ";
  bool first = true;
  for (size_t r = 0; r < kNumUnservableReasons; ++r) {
    const Group& g = groups[r];
    if (g.count == 0) continue;
    line += first ? "" : ", ";
    first = false;
    const std::string n = std::to_string(g.count);
    const std::string need = std::to_string(g.max_needed);
    const std::string limit = std::to_string(g.limit);
    switch (static_cast<UnservableReason>(r)) {
      case UnservableReason::kEmptyPrompt:
        line += n + " have an empty prompt";
        break;
      case UnservableReason::kExceedsKvCache:
        line += n + " need more KV blocks for prompt + output than the whole cache holds (up to " +
                need + " blocks; the cache has " + limit + ")";
        break;
      case UnservableReason::kPromptOverBudget:
        line += n + " have a prompt longer than the token budget with chunked prefill off (up to " +
                need + " tokens; serving.max_num_batched_tokens " + limit + ")";
        break;
      case UnservableReason::kRecomputeOverBudget:
        line += n + " were preempted and their recompute (prompt + output so far) exceeds the " +
                "token budget with chunked prefill off (up to " + need +
                " tokens; serving.max_num_batched_tokens " + limit + ")";
        break;
    }
  }
  constexpr size_t kShownIds = 5;
  line += unservable.size() == 1 ? "; request " : "; requests ";
  for (size_t i = 0; i < std::min(kShownIds, unservable.size()); ++i) {
    line += (i == 0 ? "" : ", ") + std::to_string(unservable[i].id);
  }
  if (unservable.size() > kShownIds) {
    line += " and " + std::to_string(unservable.size() - kShownIds) + " more";
  }
  return line;
}

Simulator::Simulator(const ServingConfig& config, const Workload& workload,
                     CandidateSelector& selector, StopPolicy& policy, Engine& engine)
    : config_(config),
      workload_(workload),
      selector_(selector),
      policy_(policy),
      engine_(engine),
      kv_(KvCacheConfig{config.block_tokens, config.kv_cache_blocks, config.prefix_caching}),
      sglang_(config.sglang),
      batch_shape_(config.block_tokens) {
  FEATHER_CHECK(config.kv_cache_blocks > 0, "kv_cache_blocks must be resolved before the run");
  FEATHER_CHECK(config.max_num_batched_tokens > 0 && config.max_num_seqs > 0,
                "serving limits must be positive");
  FEATHER_CHECK(config.engine != ServingEngine::kSglang || config.sglang.chunked_prefill_size != 0,
                "sglang.chunked_prefill_size must be resolved before the run");
  const size_t n = workload.size();
  state_.resize(n);
  records_.requests.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const auto prompt = static_cast<uint32_t>(workload.prompts.Prompt(i).size());
    state_[i].prompt_tokens = prompt;
    state_[i].output_target = workload.output_tokens[i];
    RequestRecord& record = records_.requests[i];
    record.arrival_ns = workload.arrival_ns[i];
    record.prompt_tokens = prompt;
    record.prefix_group = workload.prompts.group[i];
  }
  // Block-hash chains of every prompt, computed once (vLLM hashes on arrival too); a shared
  // prefix's hashes once for all the requests that share it.
  chains_ = PromptChains(workload.prompts, config.block_tokens);
  if (selector.WantsCacheEvictions()) kv_.ReportEvictedOwners();
  if (!workload.predecessor.empty()) {
    FEATHER_CHECK(workload.predecessor.size() == n, "one predecessor entry per request");
    held_first_.assign(n, kNoRequest);
    held_last_.assign(n, kNoRequest);
    held_next_.assign(n, kNoRequest);
    released_.reserve(n);
  }
  running_.reserve(config.max_num_seqs);
  plan_requests_.reserve(config.max_num_seqs);
  decode_requests_.reserve(config.max_num_seqs);
  if (config.warm_prefix_cache) WarmPrefixCache();
}

void Simulator::WarmPrefixCache() {
  FEATHER_CHECK(config_.prefix_caching, "serving.warm_prefix_cache needs prefix caching");
  // In arrival order (the ids' order), as the warm-up would have run them; a head already
  // cached (every request of a group after the first) costs one lookup. The request's own id
  // holds the blocks for the moment: Free leaves its table empty, as before its arrival.
  for (RequestId id = 0; id < state_.size(); ++id) {
    const uint32_t head_blocks = workload_.prompts.Head(id).tokens / config_.block_tokens;
    if (head_blocks == 0 || head_blocks > config_.kv_cache_blocks) continue;
    const uint32_t head_tokens = head_blocks * config_.block_tokens;
    const ChainView chain = chains_.ChainOf(id);
    // The lookup keeps one token to compute; a head one token longer is covered when all of its
    // full blocks are.
    if (kv_.LookupCachedTokens(chain, head_tokens + 1) >= head_tokens) continue;
    if (!kv_.Allocate(id, chain, head_tokens + 1, head_tokens)) continue;
    kv_.CacheBlocks(id, chain, head_tokens);
    kv_.Free(id);
  }
}

std::optional<UnservableRequest> Simulator::UnservableOnArrival(RequestId id) const {
  const RequestState& s = state_[id];
  if (s.prompt_tokens == 0) {
    return UnservableRequest{id, UnservableReason::kEmptyPrompt, 0, 0};
  }
  // The step that samples the last token holds KV for every token before it.
  const uint64_t kv_tokens = uint64_t{s.prompt_tokens} + std::max<uint32_t>(s.output_target, 1) - 1;
  const uint64_t blocks = BlocksFor(kv_tokens, config_.block_tokens);
  if (blocks > config_.kv_cache_blocks) {
    return UnservableRequest{id, UnservableReason::kExceedsKvCache, blocks,
                             config_.kv_cache_blocks};
  }
  if (!config_.chunked_prefill && s.prompt_tokens > config_.max_num_batched_tokens) {
    return UnservableRequest{id, UnservableReason::kPromptOverBudget, s.prompt_tokens,
                             config_.max_num_batched_tokens};
  }
  return std::nullopt;
}

void Simulator::Reject(const UnservableRequest& rejected) {
  state_[rejected.id].phase = Phase::kRejected;
  ReleaseResumeChain(rejected.id);
  unservable_.push_back(rejected);
  ++rejected_;
  ReleaseSuccessors(rejected.id);
}

void Simulator::DeliverArrivals() {
  const bool closed = !workload_.predecessor.empty();
  while (next_arrival_ < workload_.size() && workload_.arrival_ns[next_arrival_] <= now_ns_) {
    const auto id = static_cast<RequestId>(next_arrival_++);
    const RequestId pred = closed ? workload_.predecessor[id] : kNoRequest;
    if (pred != kNoRequest && state_[pred].phase != Phase::kFinished &&
        state_[pred].phase != Phase::kRejected) {
      // Its user has not read the answer it continues: it waits on its predecessor.
      held_next_[id] = kNoRequest;
      if (held_first_[pred] == kNoRequest) {
        held_first_[pred] = id;
      } else {
        held_next_[held_last_[pred]] = id;
      }
      held_last_[pred] = id;
      ++held_;
      continue;
    }
    Deliver(id);
  }
  // Released after the arrivals above: a predecessor finishes at the end of the step that
  // brought now_ns_ here, after any trace arrival that step spanned.
  // By index: a refused request releases its own successors onto the list, to arrive now too.
  for (size_t k = 0; k < released_.size(); ++k) {
    const RequestId id = released_[k];
    records_.requests[id].arrival_ns = now_ns_;
    --held_;
    Deliver(id);
  }
  released_.clear();
  if (next_arrival_ == workload_.size() && held_ == 0) last_arrived_ = true;
}

void Simulator::Deliver(RequestId id) {
  if (const std::optional<UnservableRequest> rejected = UnservableOnArrival(id)) {
    Reject(*rejected);  // never reaches the selector, as vLLM refuses it in add_request
    return;
  }
  state_[id].phase = Phase::kWaiting;
  const RequestInfo info{id, workload_.prompts.Prompt(id), workload_.prompts.group[id]};
  Timed([&] { selector_.OnArrival(info); });
  CountWaiting(id, +1);
}

void Simulator::ReleaseSuccessors(RequestId id) {
  if (held_first_.empty()) return;
  for (RequestId next = held_first_[id]; next != kNoRequest; next = held_next_[next]) {
    released_.push_back(next);
  }
  held_first_[id] = held_last_[id] = kNoRequest;
}

void Simulator::CacheOutputBlocks(RequestId id) {
  RequestState& s = state_[id];
  const uint32_t block = config_.block_tokens;
  const ChainView chain = ChainOf(id);
  const uint32_t full_blocks = s.computed_tokens / block;
  if (full_blocks <= chain.size()) return;  // nothing computed past the chain's blocks
  uint32_t r = s.resume_chain;
  if (r == kNoChain) {
    if (free_resume_chains_.empty()) {
      r = static_cast<uint32_t>(resume_chains_.size());
      resume_chains_.emplace_back();
    } else {
      r = free_resume_chains_.back();
      free_resume_chains_.pop_back();
    }
    resume_chains_[r].resize(chain.size());
    chain.CopyTo(resume_chains_[r].data());
    s.resume_chain = r;
  }
  std::vector<PrefixHash>& extended = resume_chains_[r];
  // The tokens of the new blocks: the prompt's up to its end (the block that straddles it mixes
  // both), then output positions.
  const PromptView prompt = workload_.prompts.Prompt(id);
  output_tokens_scratch_.clear();
  for (uint64_t pos = uint64_t{extended.size()} * block; pos < uint64_t{full_blocks} * block;
       ++pos) {
    output_tokens_scratch_.push_back(pos < prompt.size() ? prompt[pos] : kOutputToken);
  }
  const PrefixHash parent = extended.empty() ? BlockHashConfig{}.seed : extended.back();
  BlockHashTable::ExtendChain(parent, PromptView(std::span<const Token>(output_tokens_scratch_)),
                              block, extended);
  kv_.CacheBlocks(id, ChainOf(id), s.computed_tokens);
}

void Simulator::ReleaseResumeChain(RequestId id) {
  RequestState& s = state_[id];
  if (s.resume_chain == kNoChain) return;
  resume_chains_[s.resume_chain].clear();
  free_resume_chains_.push_back(s.resume_chain);
  s.resume_chain = kNoChain;
}

void Simulator::Preempt(RequestId victim) {
  RequestState& s = state_[victim];
  // vLLM caches the victim's output blocks; SGLang's retract_decode releases them uncached.
  if (config_.prefix_caching && config_.engine == ServingEngine::kVllm) CacheOutputBlocks(victim);
  kv_.Free(victim);
  s.computed_tokens = 0;
  s.new_tokens = 0;
  s.cached_blocks = 0;
  s.phase = Phase::kWaiting;
  FEATHER_DCHECK(!running_.empty(), "a victim must be running");
  if (running_.back() == victim) {
    running_.pop_back();
  } else {  // SGLang's retraction order (vLLM's victim is always the newest)
    FEATHER_DCHECK(config_.engine == ServingEngine::kSglang, "vLLM's victim must be the newest");
    running_.erase(std::find(running_.begin(), running_.end(), victim));
  }
  Timed([&] { selector_.OnPreempt(victim); });
  CountWaiting(victim, +1);
  ++preemptions_;
  ++records_.requests[victim].preemptions;
  preempted_this_step_.push_back(victim);
}

bool Simulator::ScheduleRunning(uint32_t& budget_tokens) {
  bool preempted = false;
  for (size_t i = 0; i < running_.size(); ++i) {
    const RequestId id = running_[i];
    RequestState& s = state_[id];
    s.new_tokens = 0;
    if (budget_tokens == 0) continue;
    const uint32_t need = s.SequenceTokens() - s.computed_tokens;
    if (!config_.chunked_prefill && need > budget_tokens) continue;
    const uint32_t n = std::min(need, budget_tokens);
    bool self_preempted = false;
    while (!kv_.Allocate(id, ChainOf(id), s.SequenceTokens(), s.computed_tokens + n)) {
      const RequestId victim = running_.back();
      Preempt(victim);
      preempted = true;
      if (victim == id) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;
    RegisterScheduledBlocks(id, n);
    s.new_tokens = n;
    budget_tokens -= n;
  }
  return preempted;
}

void Simulator::RegisterScheduledBlocks(RequestId id, uint32_t new_tokens) {
  // Safe to hit in this step: a request that hits a block filled in this step is itself a
  // prefill (a hit stops before the last prompt token), and engines write every prefill chunk's
  // KV of a layer before prefill attention of that layer reads any (hw/cpu_engine.cc); and a
  // request scheduled this step is never preempted later in it (victims come from the back of
  // running_, not yet scheduled).
  // Every step, decode too: a full output block holds a hash in vLLM (freed to the queue's
  // tail, not its head) although the prompt chain does not cover it; a resumed request's chain
  // covers the output blocks it had (CacheOutputBlocks), registered again as it recomputes them.
  // No block fills this step (15 decode steps in 16): nothing to do, as every earlier step's
  // blocks (or, just admitted, the hit) were passed already.
  const RequestState& s = state_[id];
  if (s.computed_tokens % config_.block_tokens + new_tokens < config_.block_tokens) return;
  kv_.CacheBlocks(id, ChainOf(id), s.computed_tokens + new_tokens);
}

uint32_t Simulator::ShapeSource::HeldPrefixBlocks(RequestId id, uint32_t holders) const {
  // Physical sharing: the request's table, as far as its chain goes, while at least `holders`
  // requests hold each block.
  const std::span<const uint32_t> table = sim_.kv_.BlockTable(id);
  const size_t full = std::min<size_t>(table.size(), sim_.ChainOf(id).size());
  size_t shared = 0;
  while (shared < full && sim_.kv_.RefCount(table[shared]) >= holders) ++shared;
  return static_cast<uint32_t>(shared);
}

StopContext Simulator::BaseStopContext(const Candidate& candidate, uint32_t sequence) const {
  StopContext context;
  context.batch_size = static_cast<uint32_t>(running_.size());
  context.admitted_this_round = admitted_this_step_;
  context.signal = candidate.signal;
  context.waiting = static_cast<uint32_t>(selector_.NumWaiting());
  context.kv_used_blocks = kv_.NumUsedBlocks();
  context.kv_total_blocks = kv_.num_blocks();
  context.candidate_blocks = (sequence + config_.block_tokens - 1) / config_.block_tokens;
  context.max_batch_requests = config_.max_num_seqs;
  return context;
}

void Simulator::DeliverEvictions() {
  if (kv_.EvictedOwners().empty()) return;
  Timed([&] {
    for (const RequestId id : kv_.EvictedOwners()) selector_.OnCacheEvicted(id);
  });
  kv_.ClearEvictedOwners();
}

void Simulator::AdmitWaiting(uint32_t& budget_tokens) {
  DeliverEvictions();  // what the running requests' growth evicted
  Timed([&] {
    selector_.BeginRound();
    policy_.BeginRound();
  });
  // The batch's decode shape, for a policy that reads it (policies/batch_shape.h).
  const bool shape = policy_.WantsBatchShape();
  if (shape) {
    batch_shape_.Clear();
    for (const RequestId id : running_) {
      batch_shape_.AddRunning(id, state_[id].SequenceTokens(), shape_source_);
    }
    if (!running_.empty()) {
      batch_shape_.SetCommonPrefixTokens(
          kv_.CommonPrefixBlocks(running_.front(), static_cast<uint32_t>(running_.size())) *
          config_.block_tokens);
    }
  }
  uint32_t skips = 0;  // StopDecision::kSkip answers the selector took this round
  while (running_.size() < config_.max_num_seqs && budget_tokens > 0) {
    const std::optional<Candidate> candidate = Timed([&] { return selector_.Next(); });
    if (!candidate) break;
    const RequestId id = candidate->id;
    RequestState& s = state_[id];
    const uint32_t sequence = s.SequenceTokens();
    const uint32_t cached = kv_.LookupCachedTokens(ChainOf(id), sequence);
    if (!config_.chunked_prefill && sequence > config_.max_num_batched_tokens) {
      // Only a recompute can get here (a longer prompt is refused on arrival): vLLM V0 marks it
      // FINISHED_IGNORED (prompt_limit); waiting for a prefix-cache hit could block the queue.
      Timed([&] { selector_.OnCancel(id); });
      CountWaiting(id, -1);
      Reject(
          {id, UnservableReason::kRecomputeOverBudget, sequence, config_.max_num_batched_tokens});
      continue;
    }
    const uint32_t need = sequence - cached;
    if (!config_.chunked_prefill && need > budget_tokens) break;
    const uint32_t n = std::min(need, budget_tokens);
    uint32_t prefix_after = 0;  // the batch's common prefix with the candidate admitted
    {
      StopContext context = BaseStopContext(*candidate, sequence);
      if (shape) {
        prefix_after =
            batch_shape_.Fill(context, id, sequence, cached, kv_.NumUsedBlocks(), shape_source_);
      }
      const StopDecision decision = Timed([&] { return policy_.Decide(context); });
      // An empty batch always takes its first candidate: a step with nothing to run would only
      // waste the engine (every policy of the paper admits into an empty batch anyway).
      if (decision != StopDecision::kAdd && !running_.empty()) {
        if (decision == StopDecision::kSkip && skips < kMaxSkipsPerRound &&
            Timed([&] { return selector_.Skip(id); })) {
          ++skips;
          continue;  // the selector proposes its next
        }
        break;
      }
    }
    // KV pool full, or (vLLM >= 0.32's gate) the whole known sequence would not fit.
    if (!kv_.Allocate(id, ChainOf(id), sequence, cached + n,
                      config_.reserve_full_sequence ? sequence : 0)) {
      break;
    }
    Timed([&] { selector_.Admit(id); });
    DeliverEvictions();  // what this admission's blocks evicted, before the next proposal
    CountWaiting(id, -1);
    if (records_.requests[id].preemptions == 0) admitted_prompt_tokens_ += s.prompt_tokens;
    s.phase = Phase::kRunning;
    s.computed_tokens = kv_.CachedTokens(id);
    s.cached_blocks = s.computed_tokens / config_.block_tokens;
    RegisterScheduledBlocks(id, n);
    s.new_tokens = n;
    budget_tokens -= n;
    records_.requests[id].cached_tokens = s.computed_tokens;
    running_.push_back(id);
    ++admitted_this_step_;
    if (shape) batch_shape_.Admit(id, sequence, prefix_after, shape_source_);
  }
}

BatchPlan Simulator::BuildPlan() {
  plan_requests_.clear();
  BatchPlan plan;
  plan.block_tokens = config_.block_tokens;
  uint64_t prefill_private_blocks = 0;
  for (const RequestId id : running_) {
    const RequestState& s = state_[id];
    if (s.new_tokens == 0) continue;
    StepRequest r;
    r.id = id;
    r.context_tokens = s.computed_tokens;
    r.new_tokens = s.new_tokens;
    r.is_prefill = !s.DecodesThisStep();
    r.block_table = kv_.BlockTable(id);
    if (r.is_prefill) {
      plan.prefill_tokens += r.new_tokens;
      prefill_private_blocks +=
          r.block_table.size() - std::min<uint64_t>(r.block_table.size(), s.cached_blocks);
    } else {
      ++plan.decode_requests;
      plan.decode_kv_tokens += uint64_t{r.context_tokens} + 1;
    }
    plan_requests_.push_back(r);
  }
  // Distinct KV behind the decode reads: every block in use, less the blocks that only prefill
  // requests hold (their private, uncached blocks). Exact when prefill requests share nothing
  // beyond their cache hits; a slight overestimate otherwise.
  const uint64_t used_blocks = kv_.NumUsedBlocks();
  const uint64_t decode_blocks = used_blocks - std::min(used_blocks, prefill_private_blocks);
  plan.decode_kv_unique_tokens =
      std::min(plan.decode_kv_tokens, decode_blocks * config_.block_tokens);
  if (!running_.empty()) {
    plan.common_prefix_tokens =
        kv_.CommonPrefixBlocks(running_.front(), static_cast<uint32_t>(running_.size())) *
        config_.block_tokens;
  }
  plan.requests = plan_requests_;
  return plan;
}

void Simulator::FlushGapRun(uint32_t next_bits) const {
  if (gap_run_length_ > 0) *token_gap_counts_.Insert(gap_run_bits_, 0).first += gap_run_length_;
  gap_run_bits_ = next_bits;
  gap_run_length_ = 0;
}

void Simulator::FinishRequest(RequestId id) {
  RequestState& s = state_[id];
  kv_.Free(id);
  ReleaseResumeChain(id);
  Timed([&] { selector_.OnFinish(id); });
  s.phase = Phase::kFinished;
  records_.requests[id].finish_ns = now_ns_;
  sglang_.set_batch_is_full(false);  // the running batch shrank (SGLang only reads it)
  ++finished_;
  ReleaseSuccessors(id);
}

int64_t Simulator::DecodeStepNs(const BatchPlan& plan, const StepTiming& timing) {
  if (plan.decode_requests == 0) return 0;
  if (plan.prefill_tokens == 0) return timing.total_ns;
  decode_requests_.clear();
  for (const StepRequest& r : plan.requests) {
    if (!r.is_prefill) decode_requests_.push_back(r);
  }
  BatchPlan decode_plan = plan;
  decode_plan.requests = decode_requests_;
  decode_plan.prefill_tokens = 0;
  return engine_.PriceDecodeOnly(decode_plan).value_or(-1);
}

int64_t Simulator::RewardStepNs(const BatchPlan& plan, const StepTiming& timing,
                                int64_t decode_ns) const {
  if (!config_.reward_decode_only || plan.prefill_tokens == 0 || plan.decode_requests == 0) {
    return timing.total_ns;
  }
  return decode_ns >= 0 ? decode_ns : timing.total_ns;
}

void Simulator::CompleteStep(const BatchPlan& plan, const StepTiming& timing, int64_t scheduler_ns,
                             int64_t reward_ns, int64_t decode_ns) {
  StepRecord step;
  step.start_ns = now_ns_;
  step.common_prefix_tokens = plan.common_prefix_tokens;
  step.step_ns = timing.total_ns;
  step.scheduler_ns = scheduler_ns;
  step.admitted = admitted_this_step_;
  step.cascade_used = timing.cascade_used;
  step.term_ns = timing.term_ns;
  now_ns_ += timing.total_ns;

  uint32_t batch_size = 0;
  uint32_t produced = 0;
  size_t keep = 0;
  for (const RequestId id : running_) {
    RequestState& s = state_[id];
    if (s.new_tokens > 0) {
      ++batch_size;
      if (s.DecodesThisStep()) {
        ++step.decode_tokens;
      } else {
        step.prefill_tokens += s.new_tokens;
      }
      s.computed_tokens += s.new_tokens;
      s.new_tokens = 0;
      if (s.computed_tokens == s.SequenceTokens()) {  // the step sampled a token
        RequestRecord& record = records_.requests[id];
        if (s.last_token_ns >= 0) {
          const auto gap_ms = static_cast<float>(NsToMs(now_ns_ - s.last_token_ns));
          token_gap_sum_ms_ += gap_ms;
          ++token_gaps_;
          // Requests that sampled in the same step before share a gap: count runs of equal
          // gaps, one table probe per run.
          const auto bits = std::bit_cast<uint32_t>(gap_ms);
          if (bits != gap_run_bits_) FlushGapRun(bits);
          ++gap_run_length_;
        }
        if (record.first_token_ns < 0) record.first_token_ns = now_ns_;
        s.last_token_ns = now_ns_;
        ++s.generated;
        record.output_tokens = s.generated;
        ++produced;
        if (s.generated >= s.output_target) {
          FinishRequest(id);
          continue;
        }
      }
    }
    running_[keep++] = id;
  }
  running_.resize(keep);

  step.batch_size = batch_size;
  step.waiting = static_cast<uint32_t>(selector_.NumWaiting());
  step.kv_used_blocks = kv_.NumUsedBlocks();
  records_.steps.push_back(step);
  if (last_arrived_ && !waiting_recorded_) {
    waiting_at_last_arrival_ = step.waiting;
    waiting_recorded_ = true;
  }

  StepFeedback feedback{batch_size, produced, reward_ns, timing.total_ns};
  feedback.decode_ns = decode_ns;
  feedback.decode_requests = step.decode_tokens;
  feedback.prefill_tokens = plan.prefill_tokens;
  feedback.decode_kv_tokens = plan.decode_kv_tokens;
  feedback.decode_kv_unique_tokens = plan.decode_kv_unique_tokens;
  feedback.common_prefix_tokens = plan.common_prefix_tokens;
  feedback.cascade_used = timing.cascade_used;
  last_feedback_ = feedback;
  Timed([&] { policy_.OnStepExecuted(feedback); });
}

int64_t Simulator::EngineSchedulerNs(EngineRound round, bool ranked) const {
  round.ranked = ranked;
  round.admitted = admitted_this_step_;
  // AdmitWaiting appends the requests it admits to running_.
  for (size_t k = running_.size() - admitted_this_step_; k < running_.size(); ++k) {
    round.admitted_blocks += state_[running_[k]].SequenceTokens() / config_.block_tokens;
  }
  if (ranked) {
    const RoundWork work = selector_.LastRoundWork();
    round.waiting_tokens = work.waiting_tokens;
    round.tree_nodes = work.tree_nodes;
  }
  return EngineRoundNs(config_.engine_cost, round);
}

std::optional<SchedulePlan> Simulator::Schedule() {
  FEATHER_CHECK(!awaiting_completion_, "Schedule() called twice without Complete()");
  const size_t total = workload_.size();
  preempted_this_step_.clear();
  while (finished_ + rejected_ < total) {
    if (config_.max_sim_ns > 0 && now_ns_ >= config_.max_sim_ns) break;
    if (config_.max_steps > 0 && records_.steps.size() >= config_.max_steps) break;
    DeliverArrivals();
    if (running_.empty() && selector_.NumWaiting() == 0) {
      // A held request's predecessor has arrived (a lower id) and not finished, so it waits or
      // runs: an idle server holds none.
      FEATHER_CHECK(held_ == 0, "closed-loop requests held while the server is idle");
      if (next_arrival_ >= total) break;  // nothing left (cannot happen with consistent counts)
      now_ns_ = std::max(now_ns_, workload_.arrival_ns[next_arrival_]);
      continue;
    }
    admitted_this_step_ = 0;
    bool preempted = false;
    bool ranked = false;
    EngineRound round_start;
    if (config_.engine == ServingEngine::kSglang) {
      round_start = {.running = running_.size(), .waiting = selector_.NumWaiting()};
      DeliverEvictions();  // SGLang admissions evict too: those arrive at the next round
      preempted = ScheduleSglang(ranked);
    } else {
      uint32_t budget_tokens = config_.max_num_batched_tokens;
      preempted = ScheduleRunning(budget_tokens);
      round_start = {.running = running_.size(), .waiting = selector_.NumWaiting()};
      if (!preempted) AdmitWaiting(budget_tokens);
      // SGLang ranks its queue only when the running batch has room (scheduler.py,
      // _get_new_batch_prefill_raw), and no admission follows a preemption here.
      ranked = !preempted && round_start.running < config_.max_num_seqs;
    }
    if (running_.empty()) {
      // Preemption emptied the batch (admission resumes next round), or admission rejected every
      // waiting request. An empty batch with no preemption that still leaves a servable request
      // waiting would loop here forever: every block is free, the budget whole, the stop policy
      // overruled, so the arrival and recompute checks above must have caught it.
      FEATHER_CHECK(preempted || selector_.NumWaiting() == 0,
                    "an empty batch admitted nothing although requests wait");
      continue;
    }
    int64_t scheduler_ns = 0;
    switch (config_.scheduler_time) {
      case SchedulerTimeMode::kMeasured:
        scheduler_ns = pending_scheduler_ns_;
        break;
      case SchedulerTimeMode::kZero:
        break;
      case SchedulerTimeMode::kFixed:
        scheduler_ns = config_.scheduler_fixed_ns;
        break;
      case SchedulerTimeMode::kEngine:
        scheduler_ns = EngineSchedulerNs(round_start, ranked);
        break;
    }
    pending_scheduler_ns_ = 0;
    now_ns_ += scheduler_ns;
    awaiting_completion_ = true;
    return SchedulePlan{BuildPlan(), scheduler_ns, admitted_this_step_, preempted_this_step_};
  }
  return std::nullopt;
}

void Simulator::Complete(const SchedulePlan& plan, const StepTiming& timing) {
  FEATHER_CHECK(awaiting_completion_, "Complete() without a plan from Schedule()");
  awaiting_completion_ = false;
  const int64_t decode_ns = DecodeStepNs(plan.batch, timing);
  CompleteStep(plan.batch, timing, plan.scheduler_ns, RewardStepNs(plan.batch, timing, decode_ns),
               decode_ns);
}

SimResult Simulator::TakeResult() {
  SimResult result;
  result.complete = finished_ + rejected_ == workload_.size();
  result.summary = Summarize();
  result.records = std::move(records_);
  std::sort(unservable_.begin(), unservable_.end(),
            [](const UnservableRequest& a, const UnservableRequest& b) { return a.id < b.id; });
  result.unservable = std::move(unservable_);
  return result;
}

SimResult Simulator::Run(const std::function<void(const SimProgress&)>& progress,
                         uint64_t progress_every_steps) {
  const size_t total = workload_.size();
  while (const std::optional<SchedulePlan> plan = Schedule()) {
    Complete(*plan, engine_.Execute(plan->batch));
    if (progress && records_.steps.size() % progress_every_steps == 0) {
      progress(SimProgress{now_ns_, records_.steps.size(), finished_, total});
    }
  }
  return TakeResult();
}

RunSummary Simulator::Summarize() const {
  RunSummary summary;
  summary.requests = workload_.size();
  summary.requests_finished = finished_;
  summary.requests_unservable = rejected_;
  summary.admitted_prompt_tokens = admitted_prompt_tokens_;
  summary.steps = records_.steps.size();
  summary.preemptions = preemptions_;
  summary.evictions = kv_.evictions();
  const int64_t start_ns = workload_.size() > 0 ? workload_.arrival_ns.front() : 0;
  summary.duration_s = NsToS(now_ns_ - start_ns);
  // The last arrival as the run saw it: a closed-loop replay moves held requests later.
  int64_t last_arrival_ns = workload_.size() > 0 ? workload_.arrival_ns.back() : 0;
  for (const RequestRecord& r : records_.requests) last_arrival_ns = std::max(last_arrival_ns, r.arrival_ns);
  summary.arrival_span_s = NsToS(last_arrival_ns - start_ns);
  summary.waiting_at_last_arrival = waiting_at_last_arrival_;
  summary.overloaded = IsOverloaded(summary.requests, summary.arrival_span_s, last_arrived_,
                                    waiting_at_last_arrival_,
                                    NsToS(std::max<int64_t>(0, now_ns_ - last_arrival_ns)));

  std::vector<double> ttft_ms;
  double latency_ms_sum = 0;
  for (const RequestRecord& r : records_.requests) {
    summary.output_tokens += r.output_tokens;
    summary.cached_prompt_tokens += r.cached_tokens;
    if (r.first_token_ns >= 0) ttft_ms.push_back(NsToMs(r.first_token_ns - r.arrival_ns));
    if (r.finish_ns >= 0) latency_ms_sum += NsToMs(r.finish_ns - r.arrival_ns);
  }
  if (summary.duration_s > 0) {
    summary.throughput_tok_s = static_cast<double>(summary.output_tokens) / summary.duration_s;
  }
  if (!ttft_ms.empty()) {
    summary.mean_ttft_ms =
        std::accumulate(ttft_ms.begin(), ttft_ms.end(), 0.0) / static_cast<double>(ttft_ms.size());
    summary.p99_ttft_ms = Quantile(ttft_ms, 0.99);
  }
  if (finished_ > 0) summary.mean_latency_ms = latency_ms_sum / static_cast<double>(finished_);
  if (token_gaps_ > 0) {
    FlushGapRun(gap_run_bits_);
    summary.mean_tbt_ms = token_gap_sum_ms_ / static_cast<double>(token_gaps_);
    summary.p99_tbt_ms = QuantileOfCounts(token_gap_counts_, token_gaps_, 0.99);
  }
  uint64_t batch_sum = 0;
  uint64_t cascade_steps = 0;
  int64_t scheduler_ns = 0;
  int64_t engine_ns = 0;
  std::array<int64_t, kNumStepTerms> term_ns{};
  for (const StepRecord& step : records_.steps) {
    batch_sum += step.batch_size;
    summary.prefill_tokens += step.prefill_tokens;
    cascade_steps += step.cascade_used ? 1 : 0;
    scheduler_ns += step.scheduler_ns;
    engine_ns += step.step_ns;
    for (size_t t = 0; t < kNumStepTerms; ++t) term_ns[t] += step.term_ns[t];
  }
  if (!records_.steps.empty()) {
    const auto steps = static_cast<double>(records_.steps.size());
    summary.mean_batch_size = static_cast<double>(batch_sum) / steps;
    summary.cascade_step_fraction = static_cast<double>(cascade_steps) / steps;
  }
  summary.scheduler_cpu_s = NsToS(scheduler_ns);
  summary.engine_busy_s = NsToS(engine_ns);
  for (size_t t = 0; t < kNumStepTerms; ++t) summary.term_s[t] = NsToS(term_ns[t]);
  return summary;
}

}  // namespace feather
