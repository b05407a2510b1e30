// fcfs_selector.h: first-come-first-served candidate selection, vLLM v1's default policy.
//
// Waiting requests are proposed in arrival order. A preempted request goes back to the FRONT of
// the waiting queue, as vLLM v1's scheduler prepends preempted requests (its victim is the last
// admitted request, so preempting victims in that order restores the original arrival order).
//
// The waiting queue is an intrusive doubly linked list threaded through flat per-request arrays
// indexed by the dense request id: cancelling an arbitrary waiting request is O(1), and after the
// arrays have grown to the largest id in use no operation allocates.
//
// Complexity: OnArrival, Next, Admit, OnFinish, OnPreempt, OnCancel, BeginRound are O(1)
// (OnArrival amortized O(1) when it grows the arrays to a new largest id); a round that admits
// b requests costs O(b).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "policies/selector.h"

namespace feather {

class FcfsSelector final : public CandidateSelector {
 public:
  FcfsSelector() = default;
  // Pre-sizes the per-request arrays for ids below `expected_max_id` (optional).
  explicit FcfsSelector(size_t expected_max_id);

  [[nodiscard]] std::string_view Name() const override { return "fcfs"; }

  void OnArrival(const RequestInfo& request) override;
  void BeginRound() override {}
  [[nodiscard]] std::optional<Candidate> Next() override;
  void Admit(RequestId id) override;
  void OnFinish(RequestId id) override;
  void OnPreempt(RequestId id) override;
  void OnCancel(RequestId id) override;

  [[nodiscard]] size_t NumWaiting() const override { return num_waiting_; }
  [[nodiscard]] size_t NumRunning() const { return num_running_; }
  [[nodiscard]] size_t MemoryBytes() const override;

  // The waiting queue front to back (O(W); for tests and logs).
  [[nodiscard]] std::vector<RequestId> WaitingOrder() const;

 private:
  enum class State : uint8_t { kAbsent, kWaiting, kRunning };

  void EnsureId(RequestId id);
  void PushBack(RequestId id);
  void PushFront(RequestId id);
  void Unlink(RequestId id);

  // Per-request arrays indexed by id (prev/next meaningful only while waiting).
  std::vector<RequestId> prev_;
  std::vector<RequestId> next_;
  std::vector<State> state_;
  RequestId head_ = kNoRequest;
  RequestId tail_ = kNoRequest;
  size_t num_waiting_ = 0;
  size_t num_running_ = 0;
};

}  // namespace feather
