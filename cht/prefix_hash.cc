// prefix_hash.cc: the streaming, chained and striped prefix-hash schemes (see prefix_hash.h);
// the AES scheme is in prefix_hash_aes.cc.
#include "cht/prefix_hash.h"

#define XXH_STATIC_LINKING_ONLY  // XXH64_state_t on the stack: no allocation per prompt
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <thread>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "base/check.h"
#include "base/splitmix64.h"
#include "cht/prefix_hash_aes.h"

namespace feather {
namespace {

constexpr uint64_t kStreamingSeed = 0;
constexpr PrefixHash kChainInit = 0x6a09e667f3bcc909ULL;  // h_0 of the chained scheme

// ---------------------------------------------------------------------------------------------
// The striped scheme (see the header): XXH3's stripe accumulator, run over each chunk in 32-byte
// stripes, with a per-chunk scramble and a light digest.
//
// State: four 64-bit lanes and the byte count so far. A chunk of L bytes is absorbed as
// floor(L/32) stripes plus, when L is not a multiple of 32, one stripe of its last bytes padded
// with zeros (every chunk starts a stripe, so the state after chunk c depends on the first c
// chunks only). Per stripe, lane i with data word d and key word k (XXH3's accumulate step):
//   acc[i ^ 1] += d;   acc[i] += lo32(d ^ k) * hi32(d ^ k)
// After each chunk the lanes are scrambled as XXH3 scrambles its accumulators every block
// (acc ^= acc >> 47; acc ^= key; acc *= 2654435761), and the digest is
//   avalanche( bytes · P1 + fold(acc0 ^ s0, acc1 ^ s1) + fold(acc2 ^ s2, acc3 ^ s3) )
// where fold is the 64x64 -> 128 multiply folded to 64 bits (XXH3's mergeAccs). The byte count
// in the digest tells a partial final chunk from the same tokens followed by zeros.
// The key words are a fixed table (splitmix64 of a constant). The AVX2 path (four lanes in one
// register, taken where the CPU has AVX2), the SSE2 path (two lanes per register) and the
// scalar path compute the same values; tests compare them.

constexpr size_t kStripeBytes = 32;
constexpr uint64_t kPrime32 = 2654435761ULL;
constexpr uint64_t kPrime64 = 0x9E3779B185EBCA87ULL;
constexpr size_t kStripeKeys = 8;  // key offset rotates over 8 stripes

constexpr std::array<uint64_t, 4 * kStripeKeys + 8> MakeStripeKeys() {
  std::array<uint64_t, 4 * kStripeKeys + 8> keys{};
  SplitMix64 generator{0x243F6A8885A308D3ULL};  // pi
  for (uint64_t& k : keys) k = generator.Next();
  return keys;
}
constexpr auto kStripeKeyTable = MakeStripeKeys();
// Words [4·kStripeKeys, +4): scramble key; [+4, +8): digest key.
constexpr size_t kScrambleKey = 4 * kStripeKeys;
constexpr size_t kDigestKey = 4 * kStripeKeys + 4;

struct StripedState {
  alignas(16) uint64_t acc[4];
  uint64_t bytes;
};
constexpr StripedState kStripedInit = {
    {0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL},
    0};

uint64_t LoadWord(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Absorbs `n` stripes at `data` (stripe s of the chunk uses key row s mod kStripeKeys).
void AccumulateScalar(uint64_t* acc, const unsigned char* data, size_t n, size_t first_stripe) {
  for (size_t s = 0; s < n; ++s) {
    const uint64_t* key = &kStripeKeyTable[4 * ((first_stripe + s) % kStripeKeys)];
    for (size_t i = 0; i < 4; ++i) {
      const uint64_t d = LoadWord(data + 32 * s + 8 * i);
      const uint64_t dk = d ^ key[i];
      acc[i ^ 1] += d;
      acc[i] += (dk & 0xffffffffULL) * (dk >> 32);
    }
  }
}

void ScrambleScalar(uint64_t* acc) {
  for (size_t i = 0; i < 4; ++i) {
    uint64_t a = acc[i];
    a ^= a >> 47;
    a ^= kStripeKeyTable[kScrambleKey + i];
    acc[i] = a * kPrime32;
  }
}

#if defined(__SSE2__)
// One stripe (data d0 d1, key words at `key`) into the lanes a0 a1: lo32 * hi32 of each keyed
// 64-bit word, plus the data words swapped within each pair of lanes.
inline void AccumulateStripeSse2(__m128i& a0, __m128i& a1, __m128i d0, __m128i d1,
                                 const __m128i* key) {
  const __m128i dk0 = _mm_xor_si128(d0, _mm_loadu_si128(key));
  const __m128i dk1 = _mm_xor_si128(d1, _mm_loadu_si128(key + 1));
  a0 = _mm_add_epi64(a0, _mm_mul_epu32(dk0, _mm_srli_epi64(dk0, 32)));
  a1 = _mm_add_epi64(a1, _mm_mul_epu32(dk1, _mm_srli_epi64(dk1, 32)));
  a0 = _mm_add_epi64(a0, _mm_shuffle_epi32(d0, _MM_SHUFFLE(1, 0, 3, 2)));
  a1 = _mm_add_epi64(a1, _mm_shuffle_epi32(d1, _MM_SHUFFLE(1, 0, 3, 2)));
}

void AccumulateSse2(uint64_t* acc, const unsigned char* data, size_t n, size_t first_stripe) {
  __m128i a0 = _mm_load_si128(reinterpret_cast<const __m128i*>(acc));
  __m128i a1 = _mm_load_si128(reinterpret_cast<const __m128i*>(acc + 2));
  size_t row = first_stripe % kStripeKeys;
  for (size_t s = 0; s < n; ++s) {
    const __m128i* key = reinterpret_cast<const __m128i*>(&kStripeKeyTable[4 * row]);
    const __m128i d0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(data + 32 * s));
    const __m128i d1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(data + 32 * s + 16));
    AccumulateStripeSse2(a0, a1, d0, d1, key);
    row = row + 1 == kStripeKeys ? 0 : row + 1;
  }
  _mm_store_si128(reinterpret_cast<__m128i*>(acc), a0);
  _mm_store_si128(reinterpret_cast<__m128i*>(acc + 2), a1);
}
#endif

void Accumulate(uint64_t* acc, const unsigned char* data, size_t n, size_t first_stripe) {
#if defined(__SSE2__)
  AccumulateSse2(acc, data, n, first_stripe);
#else
  AccumulateScalar(acc, data, n, first_stripe);
#endif
}

__extension__ using Uint128 = unsigned __int128;  // GCC and Clang on 64-bit targets

uint64_t Fold(uint64_t a, uint64_t b) {
  const Uint128 p = static_cast<Uint128>(a) * b;
  return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
}

uint64_t StripedDigest(const StripedState& st) {
  const uint64_t* k = &kStripeKeyTable[kDigestKey];
  uint64_t h = st.bytes * kPrime64;
  h += Fold(st.acc[0] ^ k[0], st.acc[1] ^ k[1]);
  h += Fold(st.acc[2] ^ k[2], st.acc[3] ^ k[3]);
  h ^= h >> 37;  // XXH3's avalanche
  h *= 0x165667919E3779F9ULL;
  return h ^ (h >> 32);
}

// One chunk, given as at most two contiguous pieces (a chunk straddling a view's head and
// tail): absorbed, scrambled, digested. `scalar` forces the portable path (tests).
PrefixHash StripedChunk(StripedState& st, std::span<const Token> first,
                        std::span<const Token> second, bool scalar) {
  const auto accumulate = scalar ? AccumulateScalar : Accumulate;
  const auto* a = reinterpret_cast<const unsigned char*>(first.data());
  size_t na = first.size_bytes();
  size_t stripe = 0;
  alignas(16) unsigned char buffer[kStripeBytes];
  if (second.empty()) {
    const size_t full = na / kStripeBytes;
    accumulate(st.acc, a, full, 0);
    stripe = full;
    a += full * kStripeBytes;
    na -= full * kStripeBytes;
  } else {
    // Rare (one chunk per prompt at most): the stripes spanning the two pieces go through the
    // buffer, byte by byte where they straddle.
    const auto* b = reinterpret_cast<const unsigned char*>(second.data());
    size_t nb = second.size_bytes();
    while (na + nb >= kStripeBytes) {
      const size_t from_a = std::min(na, kStripeBytes);
      std::memcpy(buffer, a, from_a);
      std::memcpy(buffer + from_a, b, kStripeBytes - from_a);
      a += from_a;
      na -= from_a;
      b += kStripeBytes - from_a;
      nb -= kStripeBytes - from_a;
      accumulate(st.acc, buffer, 1, stripe++);
    }
    // What remains (< 32 bytes) continues below from one piece: move it into `a`.
    std::memset(buffer, 0, kStripeBytes);
    std::memcpy(buffer, a, na);
    std::memcpy(buffer + na, b, nb);
    na += nb;
    if (na > 0) accumulate(st.acc, buffer, 1, stripe);
    st.bytes += first.size_bytes() + second.size_bytes();
    ScrambleScalar(st.acc);
    return StripedDigest(st);
  }
  if (na > 0) {
    std::memset(buffer, 0, kStripeBytes);
    std::memcpy(buffer, a, na);
    accumulate(st.acc, buffer, 1, stripe);
  }
  st.bytes += first.size_bytes();
  ScrambleScalar(st.acc);
  return StripedDigest(st);
}

#if defined(__SSE2__)
// 32 bytes of 0xff then 32 zero bytes: the 32 bytes from offset 32 - keep keep `keep` bytes.
alignas(64) constexpr unsigned char kKeepMask[2 * kStripeBytes] = {
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0,    0,    0,    0,    0,    0,    0,    0,    0,    0,    0,    0,    0,    0,    0,    0,
    0,    0,    0,    0,    0,    0,    0,    0,    0,    0,    0,    0,    0,    0,    0,    0};

// Chunks [0, chunks) of a contiguous run that starts at a chunk boundary (only its last chunk
// may be short: `bytes` is the run's length), written to out[0, chunks): the same values as
// StripedChunk, with the lanes kept in registers across chunks.
void StripedRunSse2(StripedState& st, const unsigned char* data, size_t bytes,
                    size_t chunk_bytes, uint32_t chunks, PrefixHash* out) {
  __m128i a0 = _mm_load_si128(reinterpret_cast<const __m128i*>(st.acc));
  __m128i a1 = _mm_load_si128(reinterpret_cast<const __m128i*>(st.acc + 2));
  const __m128i* keys = reinterpret_cast<const __m128i*>(kStripeKeyTable.data());
  const __m128i s0 = _mm_loadu_si128(keys + kScrambleKey / 2);
  const __m128i s1 = _mm_loadu_si128(keys + kScrambleKey / 2 + 1);
  const __m128i prime = _mm_set1_epi32(static_cast<int>(kPrime32));
  const auto absorb = [&](const unsigned char* p, size_t row) {
    AccumulateStripeSse2(a0, a1, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)),
                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)),
                         keys + 2 * row);
  };
  // Keeps the first `keep` (< 32) bytes of the stripe at `p`, zeroes the rest (mask bytes
  // 32 - keep .. 63 - keep of kKeepMask).
  const auto absorb_masked = [&](const unsigned char* p, size_t row, size_t keep) {
    const __m128i* mask = reinterpret_cast<const __m128i*>(kKeepMask + (kStripeBytes - keep));
    const __m128i d0 = _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)),
                                     _mm_loadu_si128(mask));
    const __m128i d1 = _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)),
                                     _mm_loadu_si128(mask + 1));
    AccumulateStripeSse2(a0, a1, d0, d1, keys + 2 * row);
  };
  const auto scramble = [&](__m128i a, __m128i key) {
    a = _mm_xor_si128(_mm_xor_si128(a, _mm_srli_epi64(a, 47)), key);
    const __m128i lo = _mm_mul_epu32(a, prime);
    const __m128i hi = _mm_mul_epu32(_mm_srli_epi64(a, 32), prime);
    return _mm_add_epi64(lo, _mm_slli_epi64(hi, 32));
  };
  for (uint32_t c = 0; c < chunks; ++c) {
    const size_t len = std::min(chunk_bytes, bytes - size_t{c} * chunk_bytes);
    const unsigned char* p = data + size_t{c} * chunk_bytes;
    const size_t full = len / kStripeBytes;
    size_t row = 0;
    for (size_t s = 0; s < full; ++s) {
      absorb(p + s * kStripeBytes, row);
      row = row + 1 == kStripeKeys ? 0 : row + 1;
    }
    const size_t rest = len - full * kStripeBytes;
    if (rest > 0) {
      const unsigned char* tail = p + full * kStripeBytes;
      if (static_cast<size_t>(tail - data) + kStripeBytes <= bytes) {
        // The run goes on past this chunk: load a whole stripe and zero the bytes beyond the
        // chunk (a byte copy into a stack buffer would stall the loads on store forwarding).
        absorb_masked(tail, row, rest);
      } else {
        alignas(16) unsigned char buffer[kStripeBytes] = {};
        std::memcpy(buffer, tail, rest);
        absorb(buffer, row);
      }
    }
    a0 = scramble(a0, s0);
    a1 = scramble(a1, s1);
    _mm_store_si128(reinterpret_cast<__m128i*>(st.acc), a0);
    _mm_store_si128(reinterpret_cast<__m128i*>(st.acc + 2), a1);
    st.bytes += len;
    out[c] = StripedDigest(st);
  }
}

// The same run with the four lanes in one 256-bit register: a 32-byte stripe is one load, one
// keyed multiply and two adds (the data words swapped within each pair of lanes is a shuffle
// inside each 128-bit half). Compiled for AVX2 on its own and used only when the CPU has it
// (StripedRun); values equal the SSE2 and portable paths' (tests/cht/prefix_hash_test.cc).
#define FEATHER_AVX2 __attribute__((target("avx2"), always_inline)) inline
FEATHER_AVX2 __m256i LoadAvx2(const unsigned char* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
// One stripe's contribution to the lanes: lo32 * hi32 of each keyed word plus the data words
// swapped within each pair of lanes. Summed before they meet the lanes, so the lanes' dependency
// chain has one add per stripe pair (addition mod 2^64 is associative: the values do not change).
FEATHER_AVX2 __m256i StripeAvx2(__m256i d, const __m256i* keys, size_t row) {
  // d in a register: left to itself GCC reads the stripe from memory twice (the XOR's operand
  // and the shuffle's), and the loads, not the arithmetic, bound the loop (llvm-mca, znver3).
  __asm__("" : "+x"(d));
  const __m256i dk = _mm256_xor_si256(d, _mm256_loadu_si256(keys + row));
  const __m256i product = _mm256_mul_epu32(dk, _mm256_srli_epi64(dk, 32));
  return _mm256_add_epi64(product, _mm256_shuffle_epi32(d, _MM_SHUFFLE(1, 0, 3, 2)));
}
// The full stripes [0, full) of a chunk at `p`, added to `a`.
FEATHER_AVX2 __m256i FullStripesAvx2(__m256i a, const unsigned char* p, size_t full,
                                     const __m256i* keys) {
  size_t s = 0;
  for (; s + 2 <= full; s += 2) {
    const __m256i x = StripeAvx2(LoadAvx2(p + s * kStripeBytes), keys, s % kStripeKeys);
    const __m256i y = StripeAvx2(LoadAvx2(p + (s + 1) * kStripeBytes), keys, (s + 1) % kStripeKeys);
    a = _mm256_add_epi64(a, _mm256_add_epi64(x, y));
  }
  if (s < full)
    a = _mm256_add_epi64(a, StripeAvx2(LoadAvx2(p + s * kStripeBytes), keys, s % kStripeKeys));
  return a;
}
// XXH3's per-block scramble of the lanes.
FEATHER_AVX2 __m256i ScrambleAvx2(__m256i a, __m256i key, __m256i prime) {
  a = _mm256_xor_si256(_mm256_xor_si256(a, _mm256_srli_epi64(a, 47)), key);
  const __m256i lo = _mm256_mul_epu32(a, prime);
  const __m256i hi = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), prime);
  return _mm256_add_epi64(lo, _mm256_slli_epi64(hi, 32));
}
// StripedDigest of the lanes in `a` and the byte count.
FEATHER_AVX2 PrefixHash DigestAvx2(__m256i a, uint64_t bytes) {
  const uint64_t* k = &kStripeKeyTable[kDigestKey];
  const __m128i low = _mm256_castsi256_si128(a);
  const __m128i high = _mm256_extracti128_si256(a, 1);
  uint64_t h = bytes * kPrime64;
  h += Fold(static_cast<uint64_t>(_mm_cvtsi128_si64(low)) ^ k[0],
            static_cast<uint64_t>(_mm_extract_epi64(low, 1)) ^ k[1]);
  h += Fold(static_cast<uint64_t>(_mm_cvtsi128_si64(high)) ^ k[2],
            static_cast<uint64_t>(_mm_extract_epi64(high, 1)) ^ k[3]);
  h ^= h >> 37;
  h *= 0x165667919E3779F9ULL;
  return h ^ (h >> 32);
}
#undef FEATHER_AVX2

__attribute__((target("avx2"))) void StripedRunAvx2(StripedState& st, const unsigned char* data,
                                                    size_t bytes, size_t chunk_bytes,
                                                    uint32_t chunks, PrefixHash* out) {
  __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(st.acc));
  uint64_t total = st.bytes;
  const auto* keys = reinterpret_cast<const __m256i*>(kStripeKeyTable.data());
  const __m256i scramble_key = _mm256_loadu_si256(keys + kScrambleKey / 4);
  const __m256i prime = _mm256_set1_epi32(static_cast<int>(kPrime32));
  uint32_t c = 0;
  // The default chunk (50 tokens, 200 bytes: six stripes and 8 bytes) with its shape known at
  // compile time: the stripes unrolled, the 8-byte rest one 8-byte load (zero-extended, so no
  // mask and no bounds test). Every full-length chunk qualifies. The prompt is read 2 KB ahead
  // (about ten chunks): a chunk costs about three times XXH3's instructions for its bytes (the
  // digest, the scramble, the padded last stripe), so the out-of-order window covers fewer bytes
  // than XXH3's and the hardware prefetcher alone left the loads waiting on memory (issue 19's
  // insert benchmark, BM_InsertVsXxh3, interleaved builds, four runs each: insert over XXH3's
  // dispatched path 1.34-1.62x without, 1.15-1.26x with; 1 KB and 4 KB ahead were no better).
  constexpr size_t kDefaultChunkBytes = 50 * sizeof(Token);
  constexpr size_t kPrefetchBytes = 2048;
  if (chunk_bytes == kDefaultChunkBytes) {
    constexpr size_t kFull = kDefaultChunkBytes / kStripeBytes;
    constexpr size_t kRest = kDefaultChunkBytes - kFull * kStripeBytes;
    static_assert(kRest == 8);
    const auto whole = static_cast<uint32_t>(bytes / kDefaultChunkBytes);
    for (; c < whole; ++c) {
      const unsigned char* p = data + size_t{c} * kDefaultChunkBytes;
      // Offsets, not pointers: a pointer past the end of the prompt may not even be formed.
      if (size_t{c} * kDefaultChunkBytes + kPrefetchBytes + kDefaultChunkBytes <= bytes) {
        for (size_t line = 0; line < kDefaultChunkBytes; line += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes + line), _MM_HINT_T0);
        }
      }
      a = FullStripesAvx2(a, p, kFull, keys);
      const __m256i d = _mm256_zextsi128_si256(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + kFull * kStripeBytes)));
      a = _mm256_add_epi64(a, StripeAvx2(d, keys, kFull % kStripeKeys));
      a = ScrambleAvx2(a, scramble_key, prime);
      total += kDefaultChunkBytes;
      out[c] = DigestAvx2(a, total);
    }
  }
  for (; c < chunks; ++c) {
    const size_t len = std::min(chunk_bytes, bytes - size_t{c} * chunk_bytes);
    const unsigned char* p = data + size_t{c} * chunk_bytes;
    const size_t full = len / kStripeBytes;
    a = FullStripesAvx2(a, p, full, keys);
    const size_t rest = len - full * kStripeBytes;
    if (rest > 0) {
      const unsigned char* tail = p + full * kStripeBytes;
      __m256i d;
      if (static_cast<size_t>(tail - data) + kStripeBytes <= bytes) {
        // As in the SSE2 run: a whole stripe loaded, the bytes beyond the chunk zeroed.
        d = _mm256_and_si256(LoadAvx2(tail), LoadAvx2(kKeepMask + (kStripeBytes - rest)));
      } else {
        alignas(32) unsigned char buffer[kStripeBytes] = {};
        std::memcpy(buffer, tail, rest);
        d = LoadAvx2(buffer);
      }
      a = _mm256_add_epi64(a, StripeAvx2(d, keys, full % kStripeKeys));
    }
    a = ScrambleAvx2(a, scramble_key, prime);
    total += len;
    out[c] = DigestAvx2(a, total);
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(st.acc), a);
  st.bytes = total;
}
#endif

// Which implementation hashes a striped run (the values are the same).
enum class StripedPath : uint8_t { kBest, kSse2, kPortable };

#if defined(__SSE2__)
bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

void StripedRun(StripedPath path, StripedState& st, const unsigned char* data, size_t bytes,
                size_t chunk_bytes, uint32_t chunks, PrefixHash* out) {
  if (path == StripedPath::kBest && HasAvx2()) {
    StripedRunAvx2(st, data, bytes, chunk_bytes, chunks, out);
  } else {
    StripedRunSse2(st, data, bytes, chunk_bytes, chunks, out);
  }
}
#endif

// Chunks [first, last) of `tokens`, appended to `out`, continuing from `st`. Chunks inside one
// piece of the view go through the register-resident run (SSE2 builds), the one chunk that
// may straddle the pieces through StripedChunk.
void StripedChunks(StripedState& st, PromptView tokens, uint32_t chunk_tokens, uint32_t first,
                   uint32_t last, std::vector<PrefixHash>& out,
                   StripedPath path = StripedPath::kBest) {
  const bool scalar = path == StripedPath::kPortable;
  if (first >= last) return;
  const size_t base = out.size();
  out.resize(base + (last - first));
  PrefixHash* dst = out.data() + base;
#if defined(__SSE2__)
  if (!scalar) {
    const size_t chunk_bytes = size_t{chunk_tokens} * sizeof(Token);
    tokens.ForEachChunkRun(
        chunk_tokens, first, last,
        [&](std::span<const Token> run, uint32_t chunks) {
          StripedRun(path, st, reinterpret_cast<const unsigned char*>(run.data()),
                     run.size_bytes(), chunk_bytes, chunks, dst);
          dst += chunks;
        },
        [&](PromptView chunk) { *dst++ = StripedChunk(st, chunk.head(), chunk.tail(), false); });
    return;
  }
#endif
  for (uint32_t c = first; c < last; ++c) {
    const size_t begin = size_t{c} * chunk_tokens;
    const size_t len = std::min<size_t>(chunk_tokens, tokens.size() - begin);
    const PromptView chunk = tokens.subview(begin, len);
    *dst++ = StripedChunk(st, chunk.head(), chunk.tail(), scalar);
  }
}

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
  switch (scheme) {
    case HashScheme::kStreaming:
      return "streaming";
    case HashScheme::kChained:
      return "chained";
    case HashScheme::kStriped:
      return "striped";
    case HashScheme::kAes:
      return "aes";
  }
  return "?";
}

HashScheme DefaultHashScheme() {
  return aes_prefix_hash::HasAesNi() ? HashScheme::kAes : HashScheme::kStriped;
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

namespace {
// The striped scheme's whole prompt through `path`: the public entry point and the tests' two.
void StripedHashesVia(StripedPath path, PromptView tokens, uint32_t chunk_tokens,
                      std::vector<PrefixHash>& out) {
  FEATHER_DCHECK(chunk_tokens > 0, "chunk size must be positive");
  out.clear();
  StripedState st = kStripedInit;
  StripedChunks(st, tokens, chunk_tokens, 0, NumChunks(tokens.size(), chunk_tokens), out, path);
}
}  // namespace

void ComputeStripedHashes(PromptView tokens, uint32_t chunk_tokens, std::vector<PrefixHash>& out) {
  StripedHashesVia(StripedPath::kBest, tokens, chunk_tokens, out);
}

namespace prefix_hash_internal {
void ComputeStripedHashesPortable(PromptView tokens, uint32_t chunk_tokens,
                                  std::vector<PrefixHash>& out) {
  StripedHashesVia(StripedPath::kPortable, tokens, chunk_tokens, out);
}

void ComputeStripedHashesSse2(PromptView tokens, uint32_t chunk_tokens,
                              std::vector<PrefixHash>& out) {
  StripedHashesVia(StripedPath::kSse2, tokens, chunk_tokens, out);
}

void ComputeAesHashesVia(AesPath path, PromptView tokens, uint32_t chunk_tokens,
                         std::vector<PrefixHash>& out) {
  FEATHER_DCHECK(chunk_tokens > 0, "chunk size must be positive");
  out.clear();
  aes_prefix_hash::State st = aes_prefix_hash::Initial();
  aes_prefix_hash::Chunks(
      path == AesPath::kPortable ? aes_prefix_hash::Path::kPortable : aes_prefix_hash::Path::kAesNi,
      st, tokens, chunk_tokens, 0, NumChunks(tokens.size(), chunk_tokens), out);
}
}  // namespace prefix_hash_internal

void ComputeAesHashes(PromptView tokens, uint32_t chunk_tokens, std::vector<PrefixHash>& out) {
  FEATHER_DCHECK(chunk_tokens > 0, "chunk size must be positive");
  out.clear();
  aes_prefix_hash::State st = aes_prefix_hash::Initial();
  aes_prefix_hash::Chunks(aes_prefix_hash::Path::kBest, st, tokens, chunk_tokens, 0,
                          NumChunks(tokens.size(), chunk_tokens), out);
}

void ComputePrefixHashes(HashScheme scheme, PromptView tokens, uint32_t chunk_tokens,
                         std::vector<PrefixHash>& out) {
  switch (scheme) {
    case HashScheme::kStreaming:
      ComputeStreamingHashes(tokens, chunk_tokens, out);
      return;
    case HashScheme::kChained:
      ComputeChainedHashes(tokens, chunk_tokens, out);
      return;
    case HashScheme::kStriped:
      ComputeStripedHashes(tokens, chunk_tokens, out);
      return;
    case HashScheme::kAes:
      ComputeAesHashes(tokens, chunk_tokens, out);
      return;
  }
}

namespace {

static_assert(sizeof(XXH64_state_t) <= sizeof(PrefixHashResume::streaming));
static_assert(sizeof(StripedState) <= sizeof(PrefixHashResume::streaming));
static_assert(sizeof(aes_prefix_hash::State) <= sizeof(PrefixHashResume::streaming));

// Chunks [first, last) of `tokens`, appended to `out`, continuing from `resume` (updated).
void HashChunksResumable(HashScheme scheme, PromptView tokens, uint32_t chunk_tokens,
                         uint32_t first, uint32_t last, PrefixHashResume& resume,
                         std::vector<PrefixHash>& out) {
  thread_local std::vector<Token> straddle;
  if (scheme == HashScheme::kAes) {
    aes_prefix_hash::State st;
    std::memcpy(&st, resume.streaming, sizeof(st));
    aes_prefix_hash::Chunks(aes_prefix_hash::Path::kBest, st, tokens, chunk_tokens, first, last,
                            out);
    std::memcpy(resume.streaming, &st, sizeof(st));
    return;
  }
  if (scheme == HashScheme::kStriped) {
    StripedState st;
    std::memcpy(&st, resume.streaming, sizeof(st));
    StripedChunks(st, tokens, chunk_tokens, first, last, out);
    std::memcpy(resume.streaming, &st, sizeof(st));
    return;
  }
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
  if (scheme == HashScheme::kStriped) {
    std::memcpy(resume.streaming, &kStripedInit, sizeof(kStripedInit));
  } else if (scheme == HashScheme::kAes) {
    const aes_prefix_hash::State st = aes_prefix_hash::Initial();
    std::memcpy(resume.streaming, &st, sizeof(st));
  } else {
    XXH64_state_t state;
    XXH64_reset(&state, kStreamingSeed);
    std::memcpy(resume.streaming, &state, sizeof(state));
  }
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
