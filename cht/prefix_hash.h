// prefix_hash.h: cumulative prefix-hash vectors over K-token chunks (paper, Appendix
// "Prefix Hash Computation").
//
// A prompt of T tokens becomes C = ceil(T / K) hashes h_1..h_C, the final partial chunk included,
// such that two prompts have equal h_c exactly when (up to 64-bit collisions) they share their
// first min(cK, T) tokens and have the same length up to that boundary. Two schemes:
//   kStreaming: h_c = XXH64 digest of the streaming state after token min(cK, T) (Alg.
//               ComputeHashes): every token is hashed once, O(T).
//   kChained:   l_c = XXH3(chunk c) computed independently per chunk (parallelizable), then
//               h_c = XXH3(h_{c-1} || l_c) (Alg. ComputeHashesParallel): O(T/threads + C).
//   kStriped:   XXH3's stripe accumulator (four 64-bit lanes, 32-byte stripes, keyed
//               multiply-accumulate) carried across chunks, each chunk starting a stripe and
//               ending with a scramble, and h_c = a light digest of the lanes and the byte
//               count (two 128-bit multiply folds and an avalanche). O(T), every token read
//               once at XXH3's bulk rate: the streaming scheme pays XXH64's slower loop and a
//               full XXH64 digest per chunk, the chained one XXH3's short-input path per chunk
//               (issue 19: CHT insert within 1.3x of XXH3 over the same tokens). Not a
//               published hash: its quality rests on XXH3's accumulate and avalanche steps and
//               is checked by the tests (prefix property over small alphabets, no collisions
//               among 10^6 random chunk hashes, SSE2 path equal to the portable one).
//   kAes:       each chunk absorbed by AES rounds, one 32-byte block per (VAES) round, folded
//               to 128 bits with its length, and chained through one round per chunk:
//               H_c = aesenc(H_{c-1}, y_c), h_c = low 64 bits of H_c (cht/prefix_hash_aes.h).
//               O(T) at about half XXH3's time: the CHT's default where the CPU has AES
//               instructions (every x86-64 CPU since 2010); slow in portable code without them.
// The schemes give different values; a tree must use one scheme for all its requests.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "base/prompt_view.h"
#include "base/types.h"

namespace feather {

enum class HashScheme : uint8_t { kStreaming, kChained, kStriped, kAes };

[[nodiscard]] std::string_view ToString(HashScheme scheme);

// The fastest scheme on this CPU: kAes where it has AES instructions (AES-NI; VAES makes it
// faster still), else kStriped, whose portable and SSE2 paths do not need them. The CHT's
// default. Decisions do not depend on the scheme, only run time does.
[[nodiscard]] HashScheme DefaultHashScheme();

[[nodiscard]] constexpr uint32_t NumChunks(size_t num_tokens, uint32_t chunk_tokens) {
  return static_cast<uint32_t>((num_tokens + chunk_tokens - 1) / chunk_tokens);
}

// Replaces `out` with the streaming-scheme hash vector of `tokens`. `out` keeps its capacity, so a
// reused vector makes this allocation-free. Every function here takes a PromptView (a contiguous
// span converts to one): the hashes depend on the tokens only, not on how they are stored.
void ComputeStreamingHashes(PromptView tokens, uint32_t chunk_tokens, std::vector<PrefixHash>& out);

// Replaces `out` with the chained-scheme hash vector. With `threads` > 1 the per-chunk hashes are
// computed by that many threads (started per call: worth it only for very long prompts).
void ComputeChainedHashes(PromptView tokens, uint32_t chunk_tokens, std::vector<PrefixHash>& out,
                          unsigned threads = 1);

// Replaces `out` with the striped-scheme hash vector (allocation-free for a reused vector).
void ComputeStripedHashes(PromptView tokens, uint32_t chunk_tokens, std::vector<PrefixHash>& out);

// Replaces `out` with the AES-scheme hash vector (allocation-free for a reused vector).
void ComputeAesHashes(PromptView tokens, uint32_t chunk_tokens, std::vector<PrefixHash>& out);

void ComputePrefixHashes(HashScheme scheme, PromptView tokens, uint32_t chunk_tokens,
                         std::vector<PrefixHash>& out);

// Resumable hashing, for prompts whose heads are shared: hash a head's first k chunks once
// (PrefixHashesUpTo), keep the state after them, and hash each prompt's chunks k.. from that
// state (PrefixHashesFrom). PrefixHashesUpTo(t, k) followed by PrefixHashesFrom(t, k) gives
// ComputePrefixHashes(t) exactly, for every scheme.
struct PrefixHashResume {
  PrefixHash last = 0;                          // kChained: h_k (h_0 = the scheme's initial value)
  alignas(8) unsigned char streaming[88] = {};  // other schemes: the state after chunk k
};

// Replaces `out` with h_1..h_k of `tokens` (k * chunk_tokens <= size) and sets `resume` to the
// state after chunk k. O(k * chunk_tokens).
void PrefixHashesUpTo(HashScheme scheme, PromptView tokens, uint32_t chunk_tokens, uint32_t k,
                      std::vector<PrefixHash>& out, PrefixHashResume& resume);
// Replaces `out` with h_{k+1}..h_C of `tokens`, `resume` being the state after chunk k of the
// same tokens. O(size - k * chunk_tokens).
void PrefixHashesFrom(HashScheme scheme, PromptView tokens, uint32_t chunk_tokens, uint32_t k,
                      const PrefixHashResume& resume, std::vector<PrefixHash>& out);

namespace prefix_hash_internal {
// The striped scheme through its portable (non-SIMD) path, for tests that compare the paths.
void ComputeStripedHashesPortable(PromptView tokens, uint32_t chunk_tokens,
                                  std::vector<PrefixHash>& out);
// The striped scheme through its SSE2 path (ComputeStripedHashes takes the AVX2 path where the
// CPU has it; the portable one on a build without SSE2).
void ComputeStripedHashesSse2(PromptView tokens, uint32_t chunk_tokens,
                              std::vector<PrefixHash>& out);
// The AES scheme through a given path: kAesPortable (no AES instructions), kAesNi (128-bit
// rounds); ComputePrefixHashes takes the VAES path where the CPU has it.
enum class AesPath : uint8_t { kPortable, kAesNi };
void ComputeAesHashesVia(AesPath path, PromptView tokens, uint32_t chunk_tokens,
                         std::vector<PrefixHash>& out);
}  // namespace prefix_hash_internal

}  // namespace feather
