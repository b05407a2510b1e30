// oracle_selector.h: the paper's "vLLM User IDs" / Oracle baseline: prefix groups are given by
// the caller (RequestInfo::prefix_group), so no prefix matching is done at all.
//
// Each group keeps a FIFO of its waiting requests; a request without a group forms a singleton
// group of its own. The selector proposes the head of the best group with waiting requests,
// where groups compare lexicographically by
//   1. running requests, most first   -> keep admitting from the running batch's group while it
//                                        has waiting requests (homogeneous batches);
//   2. waiting requests, most first   -> with an empty batch, or once the batch's groups are
//                                        exhausted, move to the largest waiting group;
//   3. queue position of the group's head, earliest first (ties: oldest request first).
// "The running batch's group" is therefore the group with the most running requests among those
// that still have waiting requests. Once the selector switches to a new group its first admission
// gives that group a running request, so the following proposals stay in it instead of
// alternating between groups of similar size. Running counts are kept incrementally on Admit /
// OnFinish / OnPreempt.
//
// Queue position: arrivals are appended; a preempted request goes back to the FRONT (vLLM v1
// prepends preempted requests), i.e. it ranks before every request already waiting, both inside
// its group and for the tie-break between groups.
//
// Structures: group ids are dense (flat array external id -> group slot; singleton slots are
// recycled); every group's FIFO is an intrusive doubly linked list over dense request ids; the
// groups with waiting requests sit in an indexed binary max-heap keyed as above.
//
// Complexity (G = groups with waiting requests): OnArrival, Admit, OnFinish, OnPreempt and
// OnCancel are O(log G); Next and BeginRound are O(1); a round admitting b requests costs
// O(b log G). No allocation once the arrays have grown to the largest request / group id.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "policies/selector.h"

namespace feather {

class OracleSelector final : public CandidateSelector {
 public:
  OracleSelector() = default;

  [[nodiscard]] std::string_view Name() const override { return "oracle"; }

  void OnArrival(const RequestInfo& request) override;
  void BeginRound() override {}
  [[nodiscard]] std::optional<Candidate> Next() override;
  void Admit(RequestId id) override;
  void OnFinish(RequestId id) override;
  void OnPreempt(RequestId id) override;
  void OnCancel(RequestId id) override;

  [[nodiscard]] size_t NumWaiting() const override { return num_waiting_; }
  [[nodiscard]] size_t MemoryBytes() const override;

  // Introspection for tests and logs. `prefix_group` is the caller's id.
  [[nodiscard]] uint32_t WaitingInGroup(uint32_t prefix_group) const;
  [[nodiscard]] uint32_t RunningInGroup(uint32_t prefix_group) const;
  // Exhaustive consistency check of lists, counts and heap (O(R + G)); aborts on a violation.
  void CheckInvariants() const;

 private:
  static constexpr uint32_t kNil = 0xffffffffu;
  enum class State : uint8_t { kAbsent, kWaiting, kRunning };

  struct Group {
    RequestId head = kNoRequest;  // FIFO of waiting requests, front = next to admit
    RequestId tail = kNoRequest;
    uint32_t waiting = 0;
    uint32_t running = 0;
    uint32_t heap_pos = kNil;  // index in heap_, kNil while it has no waiting request
    bool singleton = false;
  };
  struct Request {
    RequestId prev = kNoRequest;
    RequestId next = kNoRequest;
    uint32_t group = kNil;  // group slot
    int64_t position = 0;   // queue position: smaller = earlier; preempts get ever smaller ones
    State state = State::kAbsent;
  };

  [[nodiscard]] uint32_t GroupSlotFor(uint32_t prefix_group);
  void PushBack(uint32_t slot, RequestId id);
  void PushFront(uint32_t slot, RequestId id);
  void Unlink(uint32_t slot, RequestId id);
  // Restores slot's heap membership and position after its counts or head changed.
  void Reposition(uint32_t slot);
  // Frees a singleton slot once it holds no request.
  void MaybeRelease(uint32_t slot);

  [[nodiscard]] bool Better(uint32_t a, uint32_t b) const;
  void SiftUp(uint32_t pos);
  void SiftDown(uint32_t pos);
  void HeapSet(uint32_t pos, uint32_t slot);

  std::vector<Request> requests_;        // indexed by request id
  std::vector<Group> groups_;            // indexed by group slot
  std::vector<uint32_t> external_slot_;  // prefix_group -> slot, kNil before first use
  std::vector<uint32_t> free_slots_;     // recycled singleton slots
  std::vector<uint32_t> heap_;           // group slots with waiting > 0, best at [0]
  int64_t next_back_position_ = 0;
  int64_t next_front_position_ = -1;
  size_t num_waiting_ = 0;
};

}  // namespace feather
