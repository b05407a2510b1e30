// stop_policy_io.h: saves a stop policy's configuration and learned state to JSON and loads it
// back — pretrain in simulation, then run frozen elsewhere. The only file of policies/ that
// includes nlohmann-json; the policies themselves hold plain structs.
//
// Format (version 1; keys in this order, 2-space indent, trailing newline):
//   { "format": "feather-stop-policy", "version": 1, "kind": "<Name()>",
//     "options": { the fields that shape decisions },
//     "state": { the learned/mutable state } }
//   always:           options {}, state {}
//   heuristic:        options {max_loss_chunks, relaxed_loss_chunks, relaxed_min_peers,
//                     floor_cap}, state {floor}
//   bandit:           options {exploration, credit_steps, state_bins}, state {total_decisions,
//                     cells: [{b_bin, delta_bin, w_bin, action, count, reward_sum}]} — cells with
//                     count > 0 (bandit-authors, bandit-delayed: the same; bandit-delayed's
//                     decisions still in flight, waiting for their credit window, are not saved:
//                     a loaded policy has none)
//   qlearning:        options {learning_rate, discount, epsilon_start, epsilon_min,
//                     epsilon_decay_decisions, state_bins}, state {decisions, epsilon
//                     (informational: derived from decisions, not read back), rng_state, cells:
//                     [{b_bin, delta_bin, w_bin, action, q, visits}]} — cells with visits > 0
//                     or q ≠ 0
//   dynamic-batching: options {latency_target_ms, memory_fraction, forgetting}, state {fit:
//                     {weight_sum, n_sum, n2_sum, t_sum, nt_sum, min_batch_seen,
//                     max_batch_seen}}
// Bins are indices into the scheme named by options.state_bins (policy_state.h); cells are
// written in table order, so save → load → save is byte-identical.
//
// Loading replaces the policy's options and state with the file's (the file is the policy; the
// seed is superseded by rng_state). It leaves learning() alone: freezing is the caller's choice.
// Errors throw std::runtime_error naming the file and every bad field (path, value, constraint)
// in one message; a file saved by another kind is refused before anything is read.
// Complexity: O(table cells) for bandit and qlearning, O(1) otherwise.
#pragma once

#include <string>
#include <string_view>

#include "policies/stop_policy.h"

namespace feather {

// Atomic: writes `path`.tmp, then renames it over `path`. Throws std::runtime_error on I/O
// failure (the temporary is removed) or for a policy type this file does not know.
void SaveStopPolicy(const StopPolicy& policy, const std::string& path);
// Throws std::runtime_error (missing file, bad JSON, wrong kind, missing or bad fields).
void LoadStopPolicy(StopPolicy& policy, const std::string& path);

// The same, to and from text; `source` names the text in error messages.
[[nodiscard]] std::string StopPolicyToJson(const StopPolicy& policy);
void StopPolicyFromJson(StopPolicy& policy, std::string_view text, const std::string& source);

}  // namespace feather
