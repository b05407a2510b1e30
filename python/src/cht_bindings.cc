// cht_bindings.cc: feather.ChunkedHashTree, feather.ChtCandidate, feather.HashScheme and
// feather.prefix_hashes (cht/chunked_hash_tree.h, cht/prefix_hash.h).
//
// Every precondition the C++ tree checks with FEATHER_CHECK (an abort) is checked here first and
// raised as ValueError: an id already present, admitting a request that is not waiting, finishing
// or requeueing one that is not active. Ids are bounded (kMaxRequestId) because the tree keeps
// flat per-id arrays: a stray id of 4e9 would otherwise allocate tens of gigabytes.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/operators.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "base/flat_hash_map.h"
#include "base/types.h"
#include "cht/chunked_hash_tree.h"
#include "cht/prefix_hash.h"
#include "python/src/bindings.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace feather::python {
namespace {

constexpr RequestId kMaxRequestId = (RequestId{1} << 22) - 1;  // 4,194,303: < 230 MB of slots

void CheckId(RequestId id) {
  if (id > kMaxRequestId) {
    throw nb::value_error(("request id " + std::to_string(id) + " is over " +
                           std::to_string(kMaxRequestId) +
                           " (ids index flat arrays: use small ids and recycle them)")
                              .c_str());
  }
}

std::string StateOf(const ChunkedHashTree& tree, RequestId id) {
  if (tree.IsWaiting(id)) return "waiting";
  if (tree.IsActive(id)) return "active";
  if (tree.IsParked(id)) return "parked";
  if (tree.IsRetained(id)) return "retained";
  return "not in the tree";
}

void Require(bool ok, const ChunkedHashTree& tree, RequestId id, const char* operation,
             const char* wanted) {
  if (ok) return;
  throw nb::value_error((std::string(operation) + "(" + std::to_string(id) + "): the request is " +
                         StateOf(tree, id) + ", not " + wanted)
                            .c_str());
}

void CheckAbsent(const ChunkedHashTree& tree, RequestId id, const char* operation) {
  CheckId(id);
  if (tree.IsWaiting(id) || tree.IsActive(id) || tree.IsParked(id) || tree.IsRetained(id)) {
    throw nb::value_error((std::string(operation) + "(" + std::to_string(id) +
                           "): the id is already in the tree (" + StateOf(tree, id) + ")")
                              .c_str());
  }
}

// Per-block hashes -> cumulative ones: h_c = Mix(h_{c-1}, b_c), so equal h_c means equal
// b_1..b_c (up to 64-bit collisions). This makes any input prefix-consistent, as InsertHashes
// requires, and keeps the sharing of inputs that already were cumulative (vLLM's block hashes).
std::vector<PrefixHash> ChainBlockHashes(const std::vector<uint64_t>& blocks) {
  std::vector<PrefixHash> hashes(blocks.size());
  uint64_t h = 0x6a09e667f3bcc908ULL;
  for (size_t c = 0; c < blocks.size(); ++c) {
    h = MixBits((h << 17 | h >> 47) ^ MixBits(blocks[c] + 0x9e3779b97f4a7c15ULL));
    hashes[c] = h;
  }
  return hashes;
}

}  // namespace

void BindChunkedHashTree(nb::module_& m) {
  nb::enum_<HashScheme>(m, "HashScheme",
                        "How prompts become cumulative chunk hashes (cht/prefix_hash.h). One tree "
                        "uses one scheme for all its requests.")
      .value("streaming", HashScheme::kStreaming,
             "h_c = XXH64 of the streaming state after the c-th chunk (the default)")
      .value("chained", HashScheme::kChained, "h_c = XXH3(h_{c-1} || XXH3(chunk c))")
      .value("striped", HashScheme::kStriped,
             "XXH3's stripe accumulator across chunks, a light digest per chunk")
      .value("aes", HashScheme::kAes,
             "AES rounds absorb each chunk, one round per chunk chains them (the tree's default)");

  m.def(
      "prefix_hashes",
      [](const std::vector<Token>& tokens, uint32_t chunk_tokens, HashScheme scheme) {
        if (chunk_tokens == 0) throw nb::value_error("chunk_tokens must be positive");
        auto* hashes = new std::vector<PrefixHash>();
        ComputePrefixHashes(scheme, tokens, chunk_tokens, *hashes);
        nb::capsule owner(hashes, [](void* p) noexcept {
          delete static_cast<std::vector<PrefixHash>*>(p);
        });
        return nb::ndarray<nb::numpy, const uint64_t, nb::ndim<1>>(hashes->data(),
                                                                   {hashes->size()}, owner);
      },
      "tokens"_a, "chunk_tokens"_a = 50, "scheme"_a = HashScheme::kStreaming,
      "The cumulative prefix hashes h_1..h_C of a prompt over chunks of `chunk_tokens` tokens "
      "(C = ceil(len(tokens) / chunk_tokens), the last partial chunk included), as a uint64 "
      "array. Two prompts have equal h_c exactly when they share their first min(c * "
      "chunk_tokens, len) tokens (up to 64-bit collisions).");

  nb::class_<ChtCandidate>(m, "ChtCandidate",
                           "ChunkedHashTree.find_best's answer. Depths are in chunks.")
      .def_ro("request", &ChtCandidate::request, "The proposed waiting request's id.")
      .def_ro("tip_before", &ChtCandidate::tip_before,
              "Depth of the prefix every active request shares now.")
      .def_ro("tip_after", &ChtCandidate::tip_after,
              "That depth once the candidate is admitted.")
      .def_ro("peers", &ChtCandidate::peers,
              "Waiting requests (the candidate included) sharing its hash at depth tip_after; "
              "all waiting requests when tip_after is 0.")
      .def_ro("missing", &ChtCandidate::missing,
              "The candidate's missing count: its chunks absent from the working set (the "
              "minimum over waiting requests).")
      .def(nb::self == nb::self, "Field-wise equality.")
      .def("__repr__", [](const ChtCandidate& c) {
        return "ChtCandidate(request=" + std::to_string(c.request) +
               ", tip_before=" + std::to_string(c.tip_before) +
               ", tip_after=" + std::to_string(c.tip_after) + ", peers=" + std::to_string(c.peers) +
               ", missing=" + std::to_string(c.missing) + ")";
      });

  auto tree = nb::class_<ChunkedHashTree>(
      m, "ChunkedHashTree",
      "The Chunked Hash Tree prefix detector (cht/chunked_hash_tree.h): waiting and active (in "
      "the batch) requests as cumulative chunk hashes, the working set of chunks the active "
      "requests cover, each waiting request's missing count, and the shared prefix tip.\n\n"
      "Request ids are small integers chosen by the caller (0 to ChunkedHashTree.max_request_id; "
      "recycle them). "
      "Operations that break a precondition (a duplicate id, admitting a request that is not "
      "waiting, ...) raise ValueError and leave the tree unchanged.\n\n"
      "Complexity: insert O(tokens); find_best O(1) when cached; add_to_batch, finish, remove "
      "and requeue O(compressed depth + re-priced requests * log waiting).")
      .def(
          "__init__",
          [](ChunkedHashTree* self, uint32_t chunk_tokens, HashScheme hash_scheme) {
            if (chunk_tokens == 0) throw nb::value_error("chunk_tokens must be positive");
            ChtConfig config;
            config.chunk_tokens = chunk_tokens;
            config.hash_scheme = hash_scheme;
            new (self) ChunkedHashTree(config);
          },
          "chunk_tokens"_a = 50, "hash_scheme"_a = HashScheme::kStreaming,
          "An empty tree over chunks of `chunk_tokens` tokens (50: the authors' value).")
      .def_prop_ro(
          "chunk_tokens", [](const ChunkedHashTree& t) { return t.config().chunk_tokens; },
          "Tokens per chunk.")
      .def_prop_ro(
          "hash_scheme", [](const ChunkedHashTree& t) { return t.config().hash_scheme; },
          "The hash scheme of insert().")
      .def(
          "insert",
          [](ChunkedHashTree& t, RequestId id, const std::vector<Token>& tokens) {
            CheckAbsent(t, id, "insert");
            t.Insert(id, tokens);
          },
          "id"_a, "tokens"_a,
          "Registers waiting request `id` from its prompt tokens (a sequence or array of int32 "
          "token ids). Raises ValueError when `id` is already in the tree.")
      .def(
          "insert_blocks",
          [](ChunkedHashTree& t, RequestId id, const std::vector<uint64_t>& block_hashes) {
            CheckAbsent(t, id, "insert_blocks");
            const std::vector<PrefixHash> hashes = ChainBlockHashes(block_hashes);
            t.InsertHashes(id, hashes);
          },
          "id"_a, "block_hashes"_a,
          "Registers waiting request `id` from one uint64 key per chunk (a vLLM block hash, a "
          "trace's block id). Chunk c of two requests is shared when their keys 1..c are all "
          "equal, so any sequence is valid. Keys and prompt tokens hash differently: insert "
          "every request of one tree the same way. Raises ValueError when `id` is already in "
          "the tree.")
      .def("find_best", &ChunkedHashTree::FindBest,
           "The waiting request with the fewest missing chunks (ties: the earliest inserted) "
           "with the tip depth before and after admitting it and its peers, or None when "
           "nothing waits.")
      .def(
          "add_to_batch",
          [](ChunkedHashTree& t, RequestId id) {
            Require(t.IsWaiting(id), t, id, "add_to_batch", "waiting");
            t.AddToBatch(id);
          },
          "id"_a,
          "Waiting -> active. Any waiting request may be admitted, not only find_best's. "
          "Raises ValueError when `id` is not waiting.")
      .def(
          "finish",
          [](ChunkedHashTree& t, RequestId id) {
            Require(t.IsActive(id), t, id, "finish", "active");
            t.Finish(id);
          },
          "id"_a,
          "Active -> gone (the request completed); the id may be reused. Raises ValueError "
          "when `id` is not active.")
      .def(
          "retain",
          [](ChunkedHashTree& t, RequestId id) {
            Require(t.IsActive(id), t, id, "retain", "active");
            t.Retain(id);
          },
          "id"_a,
          "Active -> retained (the request completed and the engine still caches its KV): out "
          "of the batch, so tips and peers no longer count it, but in the working set until "
          "forget, so a waiting request that continues it misses only what is not cached. "
          "Raises ValueError when `id` is not active.")
      .def(
          "forget",
          [](ChunkedHashTree& t, RequestId id) {
            Require(t.IsRetained(id), t, id, "forget", "retained");
            t.Forget(id);
          },
          "id"_a,
          "Retained -> gone (the cache evicted it); the id may be reused. Raises ValueError "
          "when `id` is not retained.")
      .def(
          "remove",
          [](ChunkedHashTree& t, RequestId id) {
            Require(t.IsWaiting(id) || t.IsParked(id), t, id, "remove", "waiting or parked");
            t.Remove(id);
          },
          "id"_a,
          "Waiting or parked -> gone (cancelled before admission). Raises ValueError when `id` "
          "is neither.")
      .def(
          "park",
          [](ChunkedHashTree& t, RequestId id) {
            Require(t.IsWaiting(id), t, id, "park", "waiting");
            t.Park(id);
          },
          "id"_a,
          "Waiting -> parked: out of find_best's reach and of num_waiting and the peer counts "
          "until unpark, still in the tree (a round that passes over a proposal, "
          "StopDecision.skip). Raises ValueError when `id` is not waiting.")
      .def(
          "unpark",
          [](ChunkedHashTree& t, RequestId id) {
            Require(t.IsParked(id), t, id, "unpark", "parked");
            t.Unpark(id);
          },
          "id"_a,
          "Parked -> waiting, with its original insertion order for ties. Raises ValueError "
          "when `id` is not parked.")
      .def(
          "requeue",
          [](ChunkedHashTree& t, RequestId id) {
            Require(t.IsActive(id), t, id, "requeue", "active");
            t.Requeue(id);
          },
          "id"_a,
          "Active -> waiting (preempted); it keeps its insertion order for tie-breaking. "
          "Raises ValueError when `id` is not active.")
      .def("tip_level", &ChunkedHashTree::TipLevel,
           "Depth in chunks of the prefix every active request shares (0 when none is active).")
      .def("num_waiting", &ChunkedHashTree::NumWaiting, "Number of waiting requests.")
      .def("num_active", &ChunkedHashTree::NumActive, "Number of active requests.")
      .def("is_waiting", &ChunkedHashTree::IsWaiting, "id"_a, "Whether `id` is waiting.")
      .def("is_active", &ChunkedHashTree::IsActive, "id"_a, "Whether `id` is active.")
      .def("is_parked", &ChunkedHashTree::IsParked, "id"_a, "Whether `id` is parked.")
      .def("is_retained", &ChunkedHashTree::IsRetained, "id"_a, "Whether `id` is retained.")
      .def("num_retained", &ChunkedHashTree::NumRetained, "Number of retained requests.")
      .def("level_shared_by_all", &ChunkedHashTree::LevelSharedByAll,
           "Depth in chunks of the prefix every present request shares, whatever its state "
           "(0 when none is common).")
      .def(
          "missing_count",
          [](const ChunkedHashTree& t, RequestId id) {
            Require(t.IsWaiting(id), t, id, "missing_count", "waiting");
            return t.MissingCount(id);
          },
          "id"_a,
          "Chunks of waiting request `id` absent from the working set. Raises ValueError when "
          "`id` is not waiting.")
      .def(
          "num_chunks_of",
          [](const ChunkedHashTree& t, RequestId id) {
            Require(t.IsWaiting(id) || t.IsActive(id) || t.IsParked(id), t, id,
                    "num_chunks_of", "in the tree");
            return t.NumChunksOf(id);
          },
          "id"_a, "Number of chunks of request `id` (waiting, active or parked).")
      .def("num_nodes", &ChunkedHashTree::NumNodes,
           "Live nodes of the path-compressed tree (the root included).")
      .def("memory_bytes", &ChunkedHashTree::MemoryBytes,
           "Bytes the tree's tables and vectors hold.");
  tree.attr("max_request_id") = kMaxRequestId;  // the largest id accepted
}

}  // namespace feather::python
