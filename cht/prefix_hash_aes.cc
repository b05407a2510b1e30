// prefix_hash_aes.cc: the AES-round prefix-hash scheme (see prefix_hash_aes.h).
#include "cht/prefix_hash_aes.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <span>

#include "base/splitmix64.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define FEATHER_AES_X86 1
#endif

namespace feather::aes_prefix_hash {
namespace {

// The portable path reads the length key and the hash as little-endian words, as the SIMD paths
// do; on a big-endian CPU (no SIMD path there) its values differ from an x86 machine's but are
// still a valid scheme: a tree only compares hashes it computed itself.

constexpr size_t kBlockBytes = 32;

// The scheme's 128-bit constants, each two little-endian 64-bit words of splitmix64 over a
// seed (e's digits): K0..K3 the lanes' starts (words 0..7), KL the length key (8, 9), KG the
// last round's key (10, 11), H0 the chain's start (12, 13).
constexpr std::array<uint64_t, 14> MakeConstants() {
  std::array<uint64_t, 14> words{};
  SplitMix64 generator{0xB7E151628AED2A6BULL};
  for (uint64_t& w : words) w = generator.Next();
  return words;
}
constexpr auto kConstants = MakeConstants();
constexpr size_t kLanesWord = 0;
constexpr size_t kLengthKeyWord = 8;
constexpr size_t kLastKeyWord = 10;
constexpr size_t kInitialWord = 12;

const unsigned char* ConstantBytes(size_t word) {
  return reinterpret_cast<const unsigned char*>(kConstants.data() + word);
}

// ---------------------------------------------------------------------------------------------
// Portable path.

constexpr uint8_t Xtime(uint8_t a) { return static_cast<uint8_t>((a << 1) ^ ((a >> 7) * 0x1b)); }
// AES's S-box: the inverse in GF(2^8) (through powers of the generator 3), then the affine map.
constexpr std::array<uint8_t, 256> MakeSbox() {
  std::array<uint8_t, 256> exp{};  // exp[i] = 3^i, i < 255
  std::array<uint8_t, 256> log{};
  uint8_t x = 1;
  for (int i = 0; i < 255; ++i) {
    exp[static_cast<size_t>(i)] = x;
    log[x] = static_cast<uint8_t>(i);
    x = static_cast<uint8_t>(x ^ Xtime(x));  // x * 3
  }
  std::array<uint8_t, 256> box{};
  for (int v = 0; v < 256; ++v) {
    const uint8_t inv =
        v == 0 ? uint8_t{0} : exp[static_cast<size_t>((255 - log[static_cast<size_t>(v)]) % 255)];
    uint8_t s = inv;
    for (int r = 1; r <= 4; ++r) s ^= static_cast<uint8_t>((inv << r) | (inv >> (8 - r)));
    box[static_cast<size_t>(v)] = static_cast<uint8_t>(s ^ 0x63);
  }
  return box;
}
constexpr auto kSbox = MakeSbox();
static_assert(kSbox[0] == 0x63 && kSbox[1] == 0x7c && kSbox[0x53] == 0xed);

struct Lanes {
  unsigned char l[4][16];
};

void AbsorbPortable(Lanes& lanes, const unsigned char* block, size_t index) {
  const size_t pair = 2 * (index & 1);
  PortableAesRound(lanes.l[pair], block, lanes.l[pair]);
  PortableAesRound(lanes.l[pair + 1], block + 16, lanes.l[pair + 1]);
}

// One chunk of `len` > 0 bytes into `h`; returns h_c.
PrefixHash ChunkPortable(State& state, const unsigned char* p, size_t len) {
  Lanes lanes;
  std::memcpy(lanes.l, ConstantBytes(kLanesWord), sizeof(lanes.l));
  size_t index = 0;
  for (size_t off = 0; off < len; off += kBlockBytes, ++index) {
    unsigned char block[kBlockBytes] = {};
    std::memcpy(block, p + off, std::min(kBlockBytes, len - off));
    AbsorbPortable(lanes, block, index);
  }
  unsigned char x[16], x2[16], y[16], key[16];
  PortableAesRound(lanes.l[0], lanes.l[2], x);
  PortableAesRound(lanes.l[1], lanes.l[3], x2);
  PortableAesRound(x, x2, y);
  std::memcpy(key, ConstantBytes(kLengthKeyWord), 16);
  const uint64_t length_key = kConstants[kLengthKeyWord] ^ static_cast<uint64_t>(len);
  std::memcpy(key, &length_key, 8);
  PortableAesRound(y, key, y);
  PortableAesRound(y, ConstantBytes(kLastKeyWord), y);
  PortableAesRound(state.h, y, state.h);
  PrefixHash out;
  std::memcpy(&out, state.h, 8);
  return out;
}

// ---------------------------------------------------------------------------------------------
// AES-NI path: the four lanes in four registers.

#if defined(FEATHER_AES_X86)
#define FEATHER_AESNI __attribute__((target("aes,sse4.1")))

// Bytes [32 - r, 64 - r) keep the first r bytes of a 32-byte block.
alignas(64) constexpr unsigned char kKeepMask[2 * kBlockBytes] = {
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

FEATHER_AESNI __m128i Load128(const unsigned char* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// Block `index` into its lane pair.
__attribute__((target("aes,sse4.1"), always_inline)) inline void AbsorbAesNi(
    __m128i& l0, __m128i& l1, __m128i& l2, __m128i& l3, size_t index, __m128i low, __m128i high) {
  if ((index & 1) == 0) {
    l0 = _mm_aesenc_si128(l0, low);
    l1 = _mm_aesenc_si128(l1, high);
  } else {
    l2 = _mm_aesenc_si128(l2, low);
    l3 = _mm_aesenc_si128(l3, high);
  }
}

FEATHER_AESNI __m128i FinishAesNi(__m128i l0, __m128i l1, __m128i l2, __m128i l3, size_t len) {
  __m128i y = _mm_aesenc_si128(_mm_aesenc_si128(l0, l2), _mm_aesenc_si128(l1, l3));
  const __m128i length_key = _mm_xor_si128(Load128(ConstantBytes(kLengthKeyWord)),
                                           _mm_cvtsi64_si128(static_cast<long long>(len)));
  y = _mm_aesenc_si128(y, length_key);
  return _mm_aesenc_si128(y, Load128(ConstantBytes(kLastKeyWord)));
}

FEATHER_AESNI void RunAesNi(State& state, const unsigned char* data, size_t bytes,
                            size_t chunk_bytes, uint32_t chunks, PrefixHash* out) {
  __m128i h = Load128(state.h);
  const unsigned char* k = ConstantBytes(kLanesWord);
  for (uint32_t c = 0; c < chunks; ++c) {
    const unsigned char* p = data + size_t{c} * chunk_bytes;
    const size_t len = std::min(chunk_bytes, bytes - size_t{c} * chunk_bytes);
    __m128i l0 = Load128(k), l1 = Load128(k + 16), l2 = Load128(k + 32), l3 = Load128(k + 48);
    const size_t full = len / kBlockBytes;
    size_t i = 0;
    for (; i + 2 <= full; i += 2) {
      const unsigned char* b = p + i * kBlockBytes;
      l0 = _mm_aesenc_si128(l0, Load128(b));
      l1 = _mm_aesenc_si128(l1, Load128(b + 16));
      l2 = _mm_aesenc_si128(l2, Load128(b + 32));
      l3 = _mm_aesenc_si128(l3, Load128(b + 48));
    }
    if (i < full)
      AbsorbAesNi(l0, l1, l2, l3, i, Load128(p + i * kBlockBytes),
                  Load128(p + i * kBlockBytes + 16));
    // The last, partial block, zero-padded without a store and a wider reload (a failed store
    // forward costs more than the block's two rounds): the default chunk's 8-byte rest by one
    // zero-extending load, others by a masked load where the run's bytes go on, else a copy.
    if (const size_t rest = len % kBlockBytes; rest != 0) {
      const unsigned char* b = p + full * kBlockBytes;
      if (rest == 8) {
        AbsorbAesNi(l0, l1, l2, l3, full, _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b)),
                    _mm_setzero_si128());
      } else if (static_cast<size_t>(b - data) + kBlockBytes <= bytes) {
        const unsigned char* keep = kKeepMask + (kBlockBytes - rest);
        AbsorbAesNi(l0, l1, l2, l3, full, _mm_and_si128(Load128(b), Load128(keep)),
                    _mm_and_si128(Load128(b + 16), Load128(keep + 16)));
      } else {
        alignas(16) unsigned char block[kBlockBytes] = {};
        std::memcpy(block, b, rest);
        AbsorbAesNi(l0, l1, l2, l3, full, Load128(block), Load128(block + 16));
      }
    }
    h = _mm_aesenc_si128(h, FinishAesNi(l0, l1, l2, l3, len));
    out[c] = static_cast<PrefixHash>(_mm_cvtsi128_si64(h));
  }
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state.h), h);
}
#undef FEATHER_AESNI

// ---------------------------------------------------------------------------------------------
// VAES path: lanes (L0, L1) in one 256-bit register and (L2, L3) in another; one vaesenc
// absorbs a whole 32-byte block.

#define FEATHER_VAES __attribute__((target("avx2,aes,vaes,sse4.1"), always_inline)) inline

FEATHER_VAES __m256i Load256(const unsigned char* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
// The rounds after the last block, for a chunk of `length_key` = KL ^ len.
FEATHER_VAES __m128i FinishVaes(__m256i a0, __m256i a1, __m128i length_key, __m128i last_key) {
  const __m256i x = _mm256_aesenc_epi128(a0, a1);
  __m128i y = _mm_aesenc_si128(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
  y = _mm_aesenc_si128(y, length_key);
  return _mm_aesenc_si128(y, last_key);
}
FEATHER_VAES __m128i LengthKey(size_t len) {
  return _mm_xor_si128(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(ConstantBytes(kLengthKeyWord))),
      _mm_cvtsi64_si128(static_cast<long long>(len)));
}

__attribute__((target("avx2,aes,vaes,sse4.1"))) void RunVaes(State& state,
                                                             const unsigned char* data,
                                                             size_t bytes, size_t chunk_bytes,
                                                             uint32_t chunks, PrefixHash* out) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state.h));
  const __m256i k0 = Load256(ConstantBytes(kLanesWord));
  const __m256i k1 = Load256(ConstantBytes(kLanesWord + 4));
  const __m128i last_key =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(ConstantBytes(kLastKeyWord)));
  const __m128i full_length_key = LengthKey(chunk_bytes);
  uint32_t c = 0;
  // The default chunk (50 tokens, 200 bytes: six blocks and 8 bytes) with its shape known at
  // compile time; every full-length chunk qualifies. The prompt is read 2 KB ahead, as the
  // striped scheme's AVX2 run does: a chunk's work is short enough that the out-of-order
  // window alone does not cover the loads' latency from memory.
  constexpr size_t kDefaultChunkBytes = 50 * sizeof(Token);
  constexpr size_t kPrefetchBytes = 4096;
  if (chunk_bytes == kDefaultChunkBytes) {
    const auto whole = static_cast<uint32_t>(bytes / kDefaultChunkBytes);
    for (; c < whole; ++c) {
      const unsigned char* p = data + size_t{c} * kDefaultChunkBytes;
      if (size_t{c} * kDefaultChunkBytes + kPrefetchBytes + kDefaultChunkBytes <= bytes) {
        for (size_t line = 0; line < kDefaultChunkBytes; line += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes + line), _MM_HINT_T0);
        }
      }
      __m256i a0 = _mm256_aesenc_epi128(k0, Load256(p));
      __m256i a1 = _mm256_aesenc_epi128(k1, Load256(p + 32));
      a0 = _mm256_aesenc_epi128(a0, Load256(p + 64));
      a1 = _mm256_aesenc_epi128(a1, Load256(p + 96));
      a0 = _mm256_aesenc_epi128(a0, Load256(p + 128));
      a1 = _mm256_aesenc_epi128(a1, Load256(p + 160));
      a0 = _mm256_aesenc_epi128(
          a0, _mm256_zextsi128_si256(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 192))));
      h = _mm_aesenc_si128(h, FinishVaes(a0, a1, full_length_key, last_key));
      out[c] = static_cast<PrefixHash>(_mm_cvtsi128_si64(h));
    }
  }
  for (; c < chunks; ++c) {
    const unsigned char* p = data + size_t{c} * chunk_bytes;
    const size_t len = std::min(chunk_bytes, bytes - size_t{c} * chunk_bytes);
    __m256i a[2] = {k0, k1};
    const size_t full = len / kBlockBytes;
    for (size_t i = 0; i < full; ++i) {
      a[i & 1] = _mm256_aesenc_epi128(a[i & 1], Load256(p + i * kBlockBytes));
    }
    if (const size_t rest = len % kBlockBytes; rest != 0) {
      // As in the AES-NI run: a masked load where the run's bytes go on, else a copy.
      const unsigned char* b = p + full * kBlockBytes;
      __m256i block;
      if (static_cast<size_t>(b - data) + kBlockBytes <= bytes) {
        block = _mm256_and_si256(Load256(b), Load256(kKeepMask + (kBlockBytes - rest)));
      } else {
        alignas(32) unsigned char copy[kBlockBytes] = {};
        std::memcpy(copy, b, rest);
        block = Load256(copy);
      }
      a[full & 1] = _mm256_aesenc_epi128(a[full & 1], block);
    }
    const __m128i length_key = len == chunk_bytes ? full_length_key : LengthKey(len);
    h = _mm_aesenc_si128(h, FinishVaes(a[0], a[1], length_key, last_key));
    out[c] = static_cast<PrefixHash>(_mm_cvtsi128_si64(h));
  }
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state.h), h);
}
#undef FEATHER_VAES
#endif  // FEATHER_AES_X86

// Chunks of one contiguous run starting at a chunk boundary (the last may be partial).
void Run(Path path, State& state, const unsigned char* data, size_t bytes, size_t chunk_bytes,
         uint32_t chunks, PrefixHash* out) {
#if defined(FEATHER_AES_X86)
  if (path == Path::kBest && HasVaes()) {
    RunVaes(state, data, bytes, chunk_bytes, chunks, out);
    return;
  }
  if (path != Path::kPortable && HasAesNi()) {
    RunAesNi(state, data, bytes, chunk_bytes, chunks, out);
    return;
  }
#endif
  for (uint32_t c = 0; c < chunks; ++c) {
    const size_t begin = size_t{c} * chunk_bytes;
    out[c] = ChunkPortable(state, data + begin, std::min(chunk_bytes, bytes - begin));
  }
}

}  // namespace

void PortableAesRound(const unsigned char state[16], const unsigned char key[16],
                      unsigned char out[16]) {
  unsigned char t[16];
  // SubBytes and ShiftRows: byte (row r, column c) is byte r + 4c; row r rotates left by r.
  for (int c = 0; c < 4; ++c) {
    for (int r = 0; r < 4; ++r) t[r + 4 * c] = kSbox[state[r + 4 * ((c + r) & 3)]];
  }
  for (int c = 0; c < 4; ++c) {
    const uint8_t a0 = t[4 * c], a1 = t[4 * c + 1], a2 = t[4 * c + 2], a3 = t[4 * c + 3];
    const uint8_t all = a0 ^ a1 ^ a2 ^ a3;
    // MixColumns: b_i = a_i ^ all ^ xtime(a_i ^ a_{i+1}).
    out[4 * c] = static_cast<unsigned char>(a0 ^ all ^ Xtime(a0 ^ a1) ^ key[4 * c]);
    out[4 * c + 1] = static_cast<unsigned char>(a1 ^ all ^ Xtime(a1 ^ a2) ^ key[4 * c + 1]);
    out[4 * c + 2] = static_cast<unsigned char>(a2 ^ all ^ Xtime(a2 ^ a3) ^ key[4 * c + 2]);
    out[4 * c + 3] = static_cast<unsigned char>(a3 ^ all ^ Xtime(a3 ^ a0) ^ key[4 * c + 3]);
  }
}

bool HasAesNi() {
#if defined(FEATHER_AES_X86)
  static const bool has = __builtin_cpu_supports("aes") && __builtin_cpu_supports("sse4.1");
  return has;
#else
  return false;
#endif
}

bool HasVaes() {
#if defined(FEATHER_AES_X86)
  // CPUID leaf 7, ECX bit 9 (not every compiler's __builtin_cpu_supports knows "vaes"); AVX2's
  // check includes the OS's saving of the 256-bit registers.
  const auto vaes_bit = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) != 0 && ((c >> 9) & 1U) != 0;
  };
  static const bool has = HasAesNi() && __builtin_cpu_supports("avx2") && vaes_bit();
  return has;
#else
  return false;
#endif
}

State Initial() {
  State s;
  std::memcpy(s.h, ConstantBytes(kInitialWord), 16);
  return s;
}

void Chunks(Path path, State& state, PromptView tokens, uint32_t chunk_tokens, uint32_t first,
            uint32_t last, std::vector<PrefixHash>& out) {
  if (first >= last) return;
  const size_t base = out.size();
  out.resize(base + (last - first));
  PrefixHash* dst = out.data() + base;
  const size_t chunk_bytes = size_t{chunk_tokens} * sizeof(Token);
  tokens.ForEachChunkRun(
      chunk_tokens, first, last,
      [&](std::span<const Token> run, uint32_t chunks) {
        Run(path, state, reinterpret_cast<const unsigned char*>(run.data()), run.size_bytes(),
            chunk_bytes, chunks, dst);
        dst += chunks;
      },
      // The chunk across the seam is hashed from a copy (thread-local scratch, allocation-free
      // once warm).
      [&](PromptView chunk) {
        thread_local std::vector<Token> straddle;
        straddle.resize(chunk.size());
        chunk.CopyTo(straddle.data());
        Run(path, state, reinterpret_cast<const unsigned char*>(straddle.data()),
            straddle.size() * sizeof(Token), chunk_bytes, 1, dst++);
      });
}

}  // namespace feather::aes_prefix_hash
