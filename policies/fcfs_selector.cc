// fcfs_selector.cc: arrival-order selection over an intrusive list (see the header).
#include "policies/fcfs_selector.h"

#include <algorithm>

#include "base/check.h"

namespace feather {

FcfsSelector::FcfsSelector(size_t expected_max_id) {
  prev_.resize(expected_max_id, kNoRequest);
  next_.resize(expected_max_id, kNoRequest);
  state_.resize(expected_max_id, State::kAbsent);
}

void FcfsSelector::EnsureId(RequestId id) {
  FEATHER_CHECK(id != kNoRequest, "request id kNoRequest is reserved");
  if (id < state_.size()) return;
  // Grow geometrically so that ids arriving in increasing order cost amortized O(1).
  const size_t size = std::max<size_t>(size_t{id} + 1, state_.size() * 2);
  prev_.resize(size, kNoRequest);
  next_.resize(size, kNoRequest);
  state_.resize(size, State::kAbsent);
}

void FcfsSelector::PushBack(RequestId id) {
  prev_[id] = tail_;
  next_[id] = kNoRequest;
  if (tail_ == kNoRequest) {
    head_ = id;
  } else {
    next_[tail_] = id;
  }
  tail_ = id;
  ++num_waiting_;
}

void FcfsSelector::PushFront(RequestId id) {
  prev_[id] = kNoRequest;
  next_[id] = head_;
  if (head_ == kNoRequest) {
    tail_ = id;
  } else {
    prev_[head_] = id;
  }
  head_ = id;
  ++num_waiting_;
}

void FcfsSelector::Unlink(RequestId id) {
  const RequestId prev = prev_[id];
  const RequestId next = next_[id];
  if (prev == kNoRequest) {
    head_ = next;
  } else {
    next_[prev] = next;
  }
  if (next == kNoRequest) {
    tail_ = prev;
  } else {
    prev_[next] = prev;
  }
  --num_waiting_;
}

void FcfsSelector::OnArrival(const RequestInfo& request) {
  EnsureId(request.id);
  FEATHER_CHECK(state_[request.id] == State::kAbsent, "request id arrived while still in use");
  state_[request.id] = State::kWaiting;
  PushBack(request.id);
}

std::optional<Candidate> FcfsSelector::Next() {
  if (head_ == kNoRequest) return std::nullopt;
  return Candidate{head_, std::nullopt};
}

void FcfsSelector::Admit(RequestId id) {
  FEATHER_CHECK(id < state_.size() && state_[id] == State::kWaiting, "admitted id is not waiting");
  FEATHER_DCHECK(id == head_, "Admit() of a request Next() did not propose");
  Unlink(id);
  state_[id] = State::kRunning;
  ++num_running_;
}

void FcfsSelector::OnFinish(RequestId id) {
  FEATHER_CHECK(id < state_.size() && state_[id] == State::kRunning, "finished id is not running");
  state_[id] = State::kAbsent;
  --num_running_;
}

void FcfsSelector::OnPreempt(RequestId id) {
  FEATHER_CHECK(id < state_.size() && state_[id] == State::kRunning, "preempted id is not running");
  state_[id] = State::kWaiting;
  --num_running_;
  PushFront(id);
}

void FcfsSelector::OnCancel(RequestId id) {
  FEATHER_CHECK(id < state_.size() && state_[id] == State::kWaiting, "cancelled id is not waiting");
  Unlink(id);
  state_[id] = State::kAbsent;
}

size_t FcfsSelector::MemoryBytes() const {
  return sizeof(*this) + prev_.capacity() * sizeof(RequestId) +
         next_.capacity() * sizeof(RequestId) + state_.capacity() * sizeof(State);
}

std::vector<RequestId> FcfsSelector::WaitingOrder() const {
  std::vector<RequestId> order;
  order.reserve(num_waiting_);
  for (RequestId id = head_; id != kNoRequest; id = next_[id]) order.push_back(id);
  return order;
}

}  // namespace feather
