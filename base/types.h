// types.h: vocabulary types shared by every layer of feather (request ids, tokens, hashes).
//
// Request ids are dense 32-bit integers chosen by the caller (the simulator recycles the ids of
// finished requests), so every per-request table is a flat array indexed by id.
#pragma once

#include <cstdint>
#include <limits>

namespace feather {

using RequestId = uint32_t;
using Token = int32_t;           // a vocabulary id, as vLLM and SGLang store them
using PrefixHash = uint64_t;     // a cumulative chunk (or block) hash

inline constexpr RequestId kNoRequest = std::numeric_limits<RequestId>::max();

}  // namespace feather
