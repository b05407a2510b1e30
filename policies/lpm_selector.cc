// lpm_selector.cc: the cache-aware request lifecycle and SGLang's LPM ranking.
#include "policies/lpm_selector.h"

#include <algorithm>

#include "base/check.h"

namespace feather {

RadixSelectorBase::RadixSelectorBase(const RadixCacheConfig& cache_config) : cache_(cache_config) {}

void RadixSelectorBase::OnArrival(const RequestInfo& request) {
  const RequestId id = request.id;
  FEATHER_CHECK(id != kNoRequest, "OnArrival without a request id");
  if (id >= states_.size()) {
    const size_t size = std::max<size_t>(size_t{id} + 1, states_.size() * 2);
    prompts_.resize(size);
    copies_.resize(size);
    states_.resize(size, State::kUnknown);
    seqs_.resize(size, 0);
    lock_nodes_.resize(size, kNoRadixNode);
    matched_tokens_.resize(size, 0);
  }
  FEATHER_CHECK(states_[id] == State::kUnknown, "OnArrival for a request already known");
  const PromptView prompt = request.prompt_tokens;
  if (prompt.contiguous()) {
    prompts_[id] = prompt.head();
  } else {
    copies_[id].resize(prompt.size());
    prompt.CopyTo(copies_[id].data());
    copy_tokens_ += prompt.size();
    prompts_[id] = copies_[id];
  }
  matched_tokens_[id] = 0;
  Enqueue(id);
}

void RadixSelectorBase::Enqueue(RequestId id) {
  states_[id] = State::kWaiting;
  waiting_.push_back(QueueEntry{id, ++seqs_[id]});
  ++num_waiting_;
}

void RadixSelectorBase::BeginRound() {
  size_t kept = 0;
  for (const QueueEntry& e : waiting_) {
    if (IsCurrent(e)) waiting_[kept++] = e;
  }
  waiting_.resize(kept);
  FEATHER_DCHECK(kept == num_waiting_, "waiting count and queue disagree");
  order_.clear();
  cursor_ = 0;
  last_round_work_ = {0, cache_.NodeCount()};
  for (const QueueEntry& e : waiting_) last_round_work_.waiting_tokens += prompts_[e.id].size();
  ComputeOrder();
  FEATHER_DCHECK(order_.size() == waiting_.size(), "ranking lost or duplicated requests");
}

std::optional<Candidate> RadixSelectorBase::Next() {
  while (cursor_ < order_.size()) {
    const QueueEntry& e = waiting_[order_[cursor_]];
    if (IsCurrent(e)) return Candidate{e.id, std::nullopt};
    ++cursor_;  // admitted, or cancelled since the ranking
  }
  return std::nullopt;
}

std::vector<RequestId> RadixSelectorBase::PendingOrder() const {
  std::vector<RequestId> ids;
  for (size_t k = cursor_; k < order_.size(); ++k) {
    if (IsCurrent(waiting_[order_[k]])) ids.push_back(waiting_[order_[k]].id);
  }
  return ids;
}

void RadixSelectorBase::Admit(RequestId id) {
  FEATHER_CHECK(cursor_ < order_.size() && waiting_[order_[cursor_]].id == id &&
                    IsCurrent(waiting_[order_[cursor_]]),
                "Admit of a request that Next() did not propose");
  ++cursor_;
  --num_waiting_;
  states_[id] = State::kRunning;
  // The request's prompt KV now lives in the cache and is held while it runs.
  const RadixInsert inserted = cache_.Insert(prompts_[id]);
  cache_.IncLockRef(inserted.node);
  lock_nodes_[id] = inserted.node;
}

void RadixSelectorBase::OnFinish(RequestId id) {
  FEATHER_CHECK(id < states_.size() && states_[id] == State::kRunning,
                "OnFinish of a request that is not running");
  cache_.DecLockRef(lock_nodes_[id]);
  lock_nodes_[id] = kNoRadixNode;
  states_[id] = State::kUnknown;
  ReleasePrompt(id);
}

void RadixSelectorBase::ReleasePrompt(RequestId id) {
  prompts_[id] = {};
  copy_tokens_ -= copies_[id].size();
  std::vector<Token>().swap(copies_[id]);
}

void RadixSelectorBase::OnPreempt(RequestId id) {
  FEATHER_CHECK(id < states_.size() && states_[id] == State::kRunning,
                "OnPreempt of a request that is not running");
  cache_.DecLockRef(lock_nodes_[id]);
  lock_nodes_[id] = kNoRadixNode;
  Enqueue(id);
}

void RadixSelectorBase::OnCancel(RequestId id) {
  FEATHER_CHECK(id < states_.size() && states_[id] == State::kWaiting,
                "OnCancel of a request that is not waiting");
  states_[id] = State::kUnknown;  // its queue entry goes stale
  --num_waiting_;
  ReleasePrompt(id);
}

size_t RadixSelectorBase::MemoryBytes() const {
  return cache_.MemoryBytes() + waiting_.capacity() * sizeof(QueueEntry) +
         order_.capacity() * sizeof(uint32_t) + matched_tokens_.capacity() * sizeof(uint64_t) +
         prompts_.capacity() * sizeof(std::span<const Token>) + copy_tokens_ * sizeof(Token) +
         copies_.capacity() * sizeof(std::vector<Token>) + states_.capacity() * sizeof(State) +
         seqs_.capacity() * sizeof(uint32_t) + lock_nodes_.capacity() * sizeof(RadixNodeId);
}

LpmSelector::LpmSelector(const LpmConfig& config)
    : RadixSelectorBase(RadixCacheConfig{config.page_size, config.cache_capacity_tokens}),
      config_(config),
      in_batch_tree_(RadixCacheConfig{1, 0}) {}

size_t LpmSelector::MemoryBytes() const {
  return RadixSelectorBase::MemoryBytes() + in_batch_tree_.MemoryBytes() +
         sort_keys_.capacity() * sizeof(SortKey) + deprioritized_.capacity() * sizeof(RequestId);
}

bool LpmSelector::WasDeprioritized(RequestId id) const {
  return std::find(deprioritized_.begin(), deprioritized_.end(), id) != deprioritized_.end();
}

void LpmSelector::ComputeOrder() {
  const size_t w = waiting_.size();
  deprioritized_.clear();
  last_round_fcfs_ = config_.fcfs_fallback && w > kLpmFcfsFallbackQueueLength;
  if (last_round_fcfs_) {  // SGLang skips matching and sorting altogether
    for (size_t i = 0; i < w; ++i) {
      order_.push_back(static_cast<uint32_t>(i));
      matched_tokens_[waiting_[i].id] = 0;
    }
    return;
  }
  in_batch_tree_.Reset();
  sort_keys_.clear();
  for (size_t i = 0; i < w; ++i) {
    const RequestId id = waiting_[i].id;
    const std::span<const Token> key = MatchKey(id);
    const uint64_t matched = cache_.MatchPrefix(key).matched_tokens;
    matched_tokens_[id] = matched;
    bool deprioritize = false;
    if (matched <= kInBatchPrefixCachingCheckThresholdTokens) {
      // In-batch prefix caching: of several waiting requests sharing an uncached prefix, run
      // one first so the others find the prefix cached.
      if (in_batch_tree_.MatchPrefix(key).matched_tokens >=
          kInBatchPrefixCachingDeprioritizeThresholdTokens) {
        deprioritize = true;
        deprioritized_.push_back(id);
      } else {
        (void)in_batch_tree_.Insert(key);
      }
    }
    // Descending length as an ascending key; deprioritized requests sort after every length.
    const uint64_t sort_key = deprioritize ? ~uint64_t{0} : ~uint64_t{0} - 1 - matched;
    sort_keys_.push_back(SortKey{sort_key, static_cast<uint32_t>(i)});
  }
  // Sorting on (key, arrival index) is SGLang's stable sort by -matched length.
  std::sort(sort_keys_.begin(), sort_keys_.end(), [](const SortKey& a, const SortKey& b) {
    return a.key != b.key ? a.key < b.key : a.index < b.index;
  });
  for (const SortKey& k : sort_keys_) order_.push_back(k.index);
}

}  // namespace feather
