// reference_cht.cc: brute-force CHT semantics (see reference_cht.h).
#include "cht/reference_cht.h"

#include <algorithm>

#include "base/check.h"

namespace feather {

void ReferenceCht::InsertHashes(RequestId id, std::span<const PrefixHash> hashes) {
  FEATHER_CHECK(!requests_.contains(id), "duplicate id");
  requests_[id] = Request{{hashes.begin(), hashes.end()}, next_seq_++, State::kWaiting};
}

std::set<std::pair<uint32_t, PrefixHash>> ReferenceCht::WorkingSet(bool batch_only) const {
  std::set<std::pair<uint32_t, PrefixHash>> ws;
  for (const auto& [id, r] : requests_) {
    if (r.state != State::kActive && (batch_only || r.state != State::kRetained)) continue;
    for (uint32_t l = 1; l <= r.hashes.size(); ++l) ws.emplace(l, r.hashes[l - 1]);
  }
  return ws;
}

uint32_t ReferenceCht::Missing(const Request& request,
                               const std::set<std::pair<uint32_t, PrefixHash>>& ws) const {
  uint32_t miss = 0;
  for (uint32_t l = 1; l <= request.hashes.size(); ++l) {
    if (!ws.contains({l, request.hashes[l - 1]})) ++miss;
  }
  return miss;
}

// The longest common prefix of the requests `in` selects.
template <typename Pred>
uint32_t ReferenceCht::CommonPrefix(Pred in) const {
  const std::vector<PrefixHash>* first = nullptr;
  size_t common = 0;
  for (const auto& [id, r] : requests_) {
    if (!in(r)) continue;
    if (first == nullptr) {
      first = &r.hashes;
      common = r.hashes.size();
      continue;
    }
    size_t c = 0;
    while (c < common && c < r.hashes.size() && r.hashes[c] == (*first)[c]) ++c;
    common = c;
  }
  return static_cast<uint32_t>(common);
}

uint32_t ReferenceCht::LevelSharedByAll() const {
  return CommonPrefix([](const Request&) { return true; });
}

uint32_t ReferenceCht::TipLevel() const {
  return CommonPrefix([](const Request& r) { return r.state == State::kActive; });
}

uint32_t ReferenceCht::MissingCount(RequestId id) const {
  return Missing(requests_.at(id), WorkingSet());
}

std::optional<ChtCandidate> ReferenceCht::FindBest() const {
  const auto ws = WorkingSet();
  const Request* best = nullptr;
  RequestId best_id = kNoRequest;
  uint32_t best_miss = 0;
  uint32_t waiting = 0;
  bool any_active = false;
  for (const auto& [id, r] : requests_) {
    if (r.state == State::kActive) any_active = true;
    if (r.state != State::kWaiting) continue;
    ++waiting;
    const uint32_t miss = Missing(r, ws);
    if (best == nullptr || miss < best_miss || (miss == best_miss && r.seq < best->seq)) {
      best = &r;
      best_id = id;
      best_miss = miss;
    }
  }
  if (best == nullptr) return std::nullopt;
  ChtCandidate c;
  c.request = best_id;
  c.missing = best_miss;
  c.tip_before = TipLevel();
  uint32_t after = 0;
  if (any_active) {
    const auto batch_ws = WorkingSet(/*batch_only=*/true);
    const uint32_t limit = std::min<uint32_t>(c.tip_before, static_cast<uint32_t>(best->hashes.size()));
    for (uint32_t l = limit; l >= 1; --l) {
      if (batch_ws.contains({l, best->hashes[l - 1]})) {
        after = l;
        break;
      }
    }
  }
  c.tip_after = after;
  for (const auto& [id, r] : requests_) {
    if (r.state != State::kWaiting) continue;
    if (after == 0 || (r.hashes.size() >= after && r.hashes[after - 1] == best->hashes[after - 1])) {
      ++c.peers;
    }
  }
  return c;
}

void ReferenceCht::AddToBatch(RequestId id) {
  Request& r = requests_.at(id);
  FEATHER_CHECK(r.state == State::kWaiting, "not waiting");
  r.state = State::kActive;
}

void ReferenceCht::Finish(RequestId id) {
  FEATHER_CHECK(requests_.at(id).state == State::kActive, "not active");
  requests_.erase(id);
}

void ReferenceCht::Retain(RequestId id) {
  Request& r = requests_.at(id);
  FEATHER_CHECK(r.state == State::kActive, "not active");
  r.state = State::kRetained;
}

void ReferenceCht::Forget(RequestId id) {
  FEATHER_CHECK(requests_.at(id).state == State::kRetained, "not retained");
  requests_.erase(id);
}

void ReferenceCht::Remove(RequestId id) {
  const State state = requests_.at(id).state;
  FEATHER_CHECK(state == State::kWaiting || state == State::kParked, "not waiting");
  requests_.erase(id);
}

void ReferenceCht::Park(RequestId id) {
  Request& r = requests_.at(id);
  FEATHER_CHECK(r.state == State::kWaiting, "not waiting");
  r.state = State::kParked;
}

void ReferenceCht::Unpark(RequestId id) {
  Request& r = requests_.at(id);
  FEATHER_CHECK(r.state == State::kParked, "not parked");
  r.state = State::kWaiting;
}

void ReferenceCht::Requeue(RequestId id) {
  Request& r = requests_.at(id);
  FEATHER_CHECK(r.state == State::kActive, "not active");
  r.state = State::kWaiting;
}

std::vector<RequestId> ReferenceCht::Waiting() const {
  std::vector<RequestId> ids;
  for (const auto& [id, r] : requests_) {
    if (r.state == State::kWaiting) ids.push_back(id);
  }
  return ids;
}

std::vector<RequestId> ReferenceCht::Parked() const {
  std::vector<RequestId> ids;
  for (const auto& [id, r] : requests_) {
    if (r.state == State::kParked) ids.push_back(id);
  }
  return ids;
}

std::vector<RequestId> ReferenceCht::Retained() const {
  std::vector<RequestId> ids;
  for (const auto& [id, r] : requests_) {
    if (r.state == State::kRetained) ids.push_back(id);
  }
  return ids;
}

std::vector<RequestId> ReferenceCht::Active() const {
  std::vector<RequestId> ids;
  for (const auto& [id, r] : requests_) {
    if (r.state == State::kActive) ids.push_back(id);
  }
  return ids;
}

}  // namespace feather
