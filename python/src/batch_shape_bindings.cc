// batch_shape_bindings.cc: feather.BatchShapeTracker (policies/batch_shape.h), the batch shape a
// stop policy reads (StopContext's batch fields), for a caller that keeps the batch itself: the
// vLLM plugin. Chains are lists of 64-bit block hashes (hash i covers blocks [0, i]).
#include <nanobind/nanobind.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <vector>

#include "policies/batch_shape.h"
#include "policies/stop_policy.h"
#include "python/src/bindings.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace feather::python {

void BindBatchShape(nb::module_& m) {
  nb::class_<BatchShapeTracker>(
      m, "BatchShapeTracker",
      "The batch's decode shape (policies/batch_shape.h): requests enter when they start running "
      "and leave when they finish or are preempted; each admission round begin_round(), then "
      "fill(context, ...) per candidate and admit(...) for each admitted one. The same code as "
      "feather's simulator; where the two can differ, the header says.")
      .def(
          "__init__",
          [](BatchShapeTracker* self, uint32_t block_tokens) {
            if (block_tokens == 0)
              throw nb::value_error("BatchShapeTracker: block_tokens must be > 0");
            new (self) BatchShapeTracker(block_tokens);
          },
          "block_tokens"_a)
      .def(
          "enter",
          [](BatchShapeTracker& t, RequestId id, const std::vector<PrefixHash>& chain) {
            if (id == kNoRequest) throw nb::value_error("BatchShapeTracker: id out of range");
            t.Enter(id, chain);
          },
          "id"_a, "chain"_a, "Request `id` starts running (end of the batch order).")
      .def("leave", &BatchShapeTracker::Leave, "id"_a,
           "Request `id` finished or was preempted (no-op if it is not in).")
      .def("__contains__", &BatchShapeTracker::Contains, "id"_a)
      .def("__len__", &BatchShapeTracker::size)
      .def(
          "members",
          [](const BatchShapeTracker& t) {
            return std::vector<RequestId>(t.members().begin(), t.members().end());
          },
          "Ids in, in batch order.")
      .def(
          "begin_round",
          [](BatchShapeTracker& t, const std::vector<uint32_t>& sequence_tokens,
             int64_t common_prefix_tokens) {
            if (sequence_tokens.size() != t.size()) {
              throw nb::value_error(
                  "BatchShapeTracker.begin_round: one sequence length per member");
            }
            t.BeginRound(sequence_tokens, common_prefix_tokens);
          },
          "sequence_tokens"_a, "common_prefix_tokens"_a = -1,
          "Starts a round: each member's sequence length (in members() order) and the leading "
          "tokens all of them share as the KV cache says (< 0: from the chains).")
      .def(
          "fill",
          [](BatchShapeTracker& t, StopContext& context, RequestId id,
             const std::vector<PrefixHash>& chain, uint32_t sequence_tokens, uint32_t cached_tokens,
             uint64_t used_blocks) {
            if (id == kNoRequest || t.Contains(id)) {
              throw nb::value_error("BatchShapeTracker.fill: the candidate must not be in");
            }
            return t.Fill(context, id, chain, sequence_tokens, cached_tokens, used_blocks);
          },
          "context"_a, "id"_a, "chain"_a, "sequence_tokens"_a, "cached_tokens"_a, "used_blocks"_a,
          "Fills the context's batch fields for a candidate; returns the common prefix the batch "
          "would keep with it admitted.")
      .def(
          "admit",
          [](BatchShapeTracker& t, RequestId id, const std::vector<PrefixHash>& chain,
             uint32_t sequence_tokens) {
            if (id == kNoRequest) throw nb::value_error("BatchShapeTracker: id out of range");
            t.Admit(id, chain, sequence_tokens);
          },
          "id"_a, "chain"_a, "sequence_tokens"_a,
          "A candidate was admitted: it enters, and the round's shape takes it.")
      .def(
          "waiting",
          [](BatchShapeTracker& t, const std::vector<PrefixHash>& chain, int delta) {
            if (delta != 1 && delta != -1) {
              throw nb::value_error("BatchShapeTracker.waiting: delta must be +1 or -1");
            }
            t.Waiting(chain, delta);
          },
          "chain"_a, "delta"_a,
          "A request with `chain` starts (+1) or stops (-1) waiting; fill() reports the waiting "
          "requests of the batch's largest first-depth group (PrefixGroup.waiting).");
}

}  // namespace feather::python
