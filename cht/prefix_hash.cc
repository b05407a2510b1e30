// prefix_hash.cc: the two prefix-hash schemes (see prefix_hash.h).
#include "cht/prefix_hash.h"

#define XXH_STATIC_LINKING_ONLY  // XXH64_state_t on the stack: no allocation per prompt
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "base/check.h"

namespace feather {
namespace {

constexpr uint64_t kStreamingSeed = 0;
constexpr PrefixHash kChainInit = 0x6a09e667f3bcc909ULL;  // h_0 of the chained scheme

void HashChunkRange(std::span<const Token> tokens, uint32_t chunk_tokens, uint32_t first,
                    uint32_t last, PrefixHash* local) {
  for (uint32_t c = first; c < last; ++c) {
    const size_t begin = size_t{c} * chunk_tokens;
    const size_t len = std::min<size_t>(chunk_tokens, tokens.size() - begin);
    local[c] = XXH3_64bits(tokens.data() + begin, len * sizeof(Token));
  }
}

}  // namespace

std::string_view ToString(HashScheme scheme) {
  return scheme == HashScheme::kStreaming ? "streaming" : "chained";
}

void ComputeStreamingHashes(PromptView tokens, uint32_t chunk_tokens,
                            std::vector<PrefixHash>& out) {
  FEATHER_DCHECK(chunk_tokens > 0, "chunk size must be positive");
  const uint32_t chunks = NumChunks(tokens.size(), chunk_tokens);
  out.resize(chunks);
  XXH64_state_t state;
  XXH64_reset(&state, kStreamingSeed);
  // The streaming state does not care where an update splits: a chunk that straddles the
  // view's two pieces is fed as two updates.
  for (uint32_t c = 0; c < chunks; ++c) {
    const size_t begin = size_t{c} * chunk_tokens;
    const size_t len = std::min<size_t>(chunk_tokens, tokens.size() - begin);
    tokens.subview(begin, len).ForEachPiece([&](std::span<const Token> piece) {
      XXH64_update(&state, piece.data(), piece.size() * sizeof(Token));
    });
    out[c] = XXH64_digest(&state);
  }
}

void ComputeChainedHashes(PromptView view, uint32_t chunk_tokens, std::vector<PrefixHash>& out,
                          unsigned threads) {
  FEATHER_DCHECK(chunk_tokens > 0, "chunk size must be positive");
  const uint32_t chunks = NumChunks(view.size(), chunk_tokens);
  out.resize(chunks);
  // Phase 1: independent chunk hashes, written into `out` and chained in place below.
  if (threads <= 1 || chunks < 2 * threads) {
    // Chunk by chunk: a chunk inside one piece is hashed in place, the one chunk that straddles
    // the two pieces (if any) from a copy (thread-local scratch: allocation-free once warm).
    thread_local std::vector<Token> straddle;
    for (uint32_t c = 0; c < chunks; ++c) {
      const size_t begin = size_t{c} * chunk_tokens;
      const size_t len = std::min<size_t>(chunk_tokens, view.size() - begin);
      const PromptView chunk = view.subview(begin, len);
      if (chunk.contiguous()) {
        out[c] = XXH3_64bits(chunk.head().data(), len * sizeof(Token));
      } else {
        straddle.resize(len);
        chunk.CopyTo(straddle.data());
        out[c] = XXH3_64bits(straddle.data(), len * sizeof(Token));
      }
    }
  } else {
    // Threads only pay for very long prompts; those are hashed from a contiguous copy.
    std::vector<Token> copy;
    if (!view.contiguous()) copy = view.ToVector();
    const std::span<const Token> tokens =
        view.contiguous() ? view.head() : std::span<const Token>(copy);
    std::vector<std::jthread> workers;
    workers.reserve(threads - 1);
    const uint32_t per_worker = (chunks + threads - 1) / threads;
    for (unsigned w = 1; w < threads; ++w) {
      const uint32_t first = std::min(chunks, w * per_worker);
      const uint32_t last = std::min(chunks, first + per_worker);
      workers.emplace_back(HashChunkRange, tokens, chunk_tokens, first, last, out.data());
    }
    HashChunkRange(tokens, chunk_tokens, 0, std::min(chunks, per_worker), out.data());
  }
  // Phase 2: sequential chaining h_c = H(h_{c-1} || l_c).
  PrefixHash previous = kChainInit;
  for (uint32_t c = 0; c < chunks; ++c) {
    const PrefixHash pair[2] = {previous, out[c]};
    previous = XXH3_64bits(pair, sizeof(pair));
    out[c] = previous;
  }
}

void ComputePrefixHashes(HashScheme scheme, PromptView tokens, uint32_t chunk_tokens,
                         std::vector<PrefixHash>& out) {
  if (scheme == HashScheme::kStreaming) {
    ComputeStreamingHashes(tokens, chunk_tokens, out);
  } else {
    ComputeChainedHashes(tokens, chunk_tokens, out);
  }
}

namespace {

static_assert(sizeof(XXH64_state_t) <= sizeof(PrefixHashResume::streaming));

// Chunks [first, last) of `tokens`, appended to `out`, continuing from `resume` (updated).
void HashChunksResumable(HashScheme scheme, PromptView tokens, uint32_t chunk_tokens,
                         uint32_t first, uint32_t last, PrefixHashResume& resume,
                         std::vector<PrefixHash>& out) {
  thread_local std::vector<Token> straddle;
  if (scheme == HashScheme::kStreaming) {
    XXH64_state_t state;
    std::memcpy(&state, resume.streaming, sizeof(state));
    for (uint32_t c = first; c < last; ++c) {
      const size_t begin = size_t{c} * chunk_tokens;
      const size_t len = std::min<size_t>(chunk_tokens, tokens.size() - begin);
      tokens.subview(begin, len).ForEachPiece([&](std::span<const Token> piece) {
        XXH64_update(&state, piece.data(), piece.size() * sizeof(Token));
      });
      out.push_back(XXH64_digest(&state));
    }
    std::memcpy(resume.streaming, &state, sizeof(state));
    return;
  }
  PrefixHash previous = resume.last;
  for (uint32_t c = first; c < last; ++c) {
    const size_t begin = size_t{c} * chunk_tokens;
    const size_t len = std::min<size_t>(chunk_tokens, tokens.size() - begin);
    const PromptView chunk = tokens.subview(begin, len);
    PrefixHash local = 0;
    if (chunk.contiguous()) {
      local = XXH3_64bits(chunk.head().data(), len * sizeof(Token));
    } else {
      straddle.resize(len);
      chunk.CopyTo(straddle.data());
      local = XXH3_64bits(straddle.data(), len * sizeof(Token));
    }
    const PrefixHash pair[2] = {previous, local};
    previous = XXH3_64bits(pair, sizeof(pair));
    out.push_back(previous);
  }
  resume.last = previous;
}

}  // namespace

void PrefixHashesUpTo(HashScheme scheme, PromptView tokens, uint32_t chunk_tokens, uint32_t k,
                      std::vector<PrefixHash>& out, PrefixHashResume& resume) {
  FEATHER_CHECK(chunk_tokens > 0 && size_t{k} * chunk_tokens <= tokens.size(),
                "PrefixHashesUpTo: k chunks must lie inside the tokens");
  resume = PrefixHashResume{};
  resume.last = kChainInit;
  XXH64_state_t state;
  XXH64_reset(&state, kStreamingSeed);
  std::memcpy(resume.streaming, &state, sizeof(state));
  out.clear();
  HashChunksResumable(scheme, tokens, chunk_tokens, 0, k, resume, out);
}

void PrefixHashesFrom(HashScheme scheme, PromptView tokens, uint32_t chunk_tokens, uint32_t k,
                      const PrefixHashResume& resume, std::vector<PrefixHash>& out) {
  FEATHER_CHECK(chunk_tokens > 0 && size_t{k} * chunk_tokens <= tokens.size(),
                "PrefixHashesFrom: k chunks must lie inside the tokens");
  PrefixHashResume state = resume;
  out.clear();
  HashChunksResumable(scheme, tokens, chunk_tokens, k, NumChunks(tokens.size(), chunk_tokens),
                      state, out);
}

}  // namespace feather
