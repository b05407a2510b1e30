// reference_cht.h: the brute-force statement of the Chunked Hash Tree's semantics.
//
// Every quantity is recomputed from scratch from the hash vectors: the working set by a scan of
// the active and retained requests, missing counts by an O(W*C) scan, the tip as the longest
// common prefix of the active requests (the batch), peers by a scan of the waiting ones. Slow on purpose; it exists so that
// tests and fuzzers can hold ChunkedHashTree equal to it after every operation.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "cht/chunked_hash_tree.h"
#include "base/types.h"

namespace feather {

class ReferenceCht {
 public:
  void InsertHashes(RequestId id, std::span<const PrefixHash> hashes);
  // The minimum (missing count, insertion order) waiting request with its tip and peers.
  [[nodiscard]] std::optional<ChtCandidate> FindBest() const;
  void AddToBatch(RequestId id);
  void Finish(RequestId id);
  void Retain(RequestId id);  // active -> retained: in the working set, not in the batch
  void Forget(RequestId id);  // retained -> gone
  void Remove(RequestId id);
  void Requeue(RequestId id);
  void Park(RequestId id);    // waiting -> parked: neither waiting nor in the working set
  void Unpark(RequestId id);  // parked -> waiting, its insertion order kept

  [[nodiscard]] uint32_t TipLevel() const;
  // The longest common prefix of every present request, whatever its state.
  [[nodiscard]] uint32_t LevelSharedByAll() const;
  [[nodiscard]] uint32_t MissingCount(RequestId id) const;
  [[nodiscard]] std::vector<RequestId> Waiting() const;
  [[nodiscard]] std::vector<RequestId> Parked() const;
  [[nodiscard]] std::vector<RequestId> Active() const;
  [[nodiscard]] std::vector<RequestId> Retained() const;

 private:
  enum class State : uint8_t { kWaiting, kActive, kParked, kRetained };
  struct Request {
    std::vector<PrefixHash> hashes;
    uint64_t seq = 0;
    State state = State::kWaiting;
  };
  template <typename Pred>
  [[nodiscard]] uint32_t CommonPrefix(Pred in) const;
  // The chunks of the active requests, and of the retained ones unless batch_only.
  [[nodiscard]] std::set<std::pair<uint32_t, PrefixHash>> WorkingSet(bool batch_only = false) const;
  [[nodiscard]] uint32_t Missing(const Request& request,
                                 const std::set<std::pair<uint32_t, PrefixHash>>& ws) const;

  std::map<RequestId, Request> requests_;  // ordered: results never depend on hash order
  uint64_t next_seq_ = 0;
};

}  // namespace feather
