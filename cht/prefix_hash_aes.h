// prefix_hash_aes.h (internal to cht/): the AES-round prefix-hash scheme, HashScheme::kAes.
//
// Why a fourth scheme. Issue 19 asks CHT insert to cost within 1.3x of hashing the prompt with
// XXH3 alone. The striped scheme reads every byte at XXH3's bulk rate (seven vector operations
// per 32 bytes) and then pays a scramble and a 128-bit-multiply digest per chunk: about 107
// instructions per 50-token chunk, 1.3-1.4x XXH3's time before the tree does any work. One AES
// round (aesenc: SubBytes, ShiftRows, MixColumns, then XOR of a round key) mixes 16 bytes in
// one instruction that x86 CPUs since 2010 run at one or two per cycle, and VAES runs two such
// rounds in one 256-bit instruction. Absorbing a 32-byte block as the round key of one VAES
// round costs one (load-fused) operation instead of seven, so a 200-byte chunk with its digest
// takes about 22 operations.
//
// The scheme. The state carried from chunk to chunk is one 128-bit block H, H_0 a constant.
// Chunk c (L bytes of tokens, the final partial chunk included) is hashed on its own:
//   - four 128-bit lanes start at constants K0..K3;
//   - 32-byte block i of the chunk (the last one zero-padded) is absorbed by the lane pair
//     (2(i mod 2), 2(i mod 2) + 1): lane 2(i mod 2) ← aesenc(lane, bytes [0, 16) of the block),
//     lane 2(i mod 2) + 1 ← aesenc(lane, bytes [16, 32));
//   - the lanes fold: x = aesenc(L0, L2), x' = aesenc(L1, L3), y = aesenc(x, x'); the chunk's
//     length enters as y = aesenc(y, KL ⊕ L), then y = aesenc(y, KG) (two rounds after the last
//     input: AES diffuses every input byte over all 16 bytes in two rounds);
//   - H_c = aesenc(H_{c-1}, y), and the prefix hash h_c = the low 64 bits of H_c.
// h_c depends on chunks 1..c only, through H. The byte count tells a partial final chunk from
// the same tokens followed by zeros. The per-chunk work is independent of H, so the CPU
// overlaps chunks; only one round per chunk (4 cycles) is serial.
//
// Quality. Not a published hash, and not a keyed or collision-resistant one against an
// adversary (neither are XXH3 and the striped scheme; vLLM uses SHA-256 block hashes where
// that matters). Its structure is that of AES-round hashes such as aHash's and gxhash's. The
// tests check what the CHT relies on: the prefix property over small alphabets, no collisions
// among 10^6 nearby inputs, avalanche (one flipped input bit flips each output bit with
// probability 1/2), and every path equal to the portable one, whose round is itself checked
// against the CPU's aesenc.
//
// Paths (values identical): VAES + AVX2 (256-bit rounds, where the CPU has them), AES-NI
// (128-bit rounds), portable (table S-box; about 30x slower, for CPUs without AES
// instructions: there kStriped is the faster scheme).
#pragma once

#include <cstdint>
#include <vector>

#include "base/prompt_view.h"
#include "base/types.h"

namespace feather::aes_prefix_hash {

enum class Path : uint8_t { kBest, kAesNi, kPortable };

struct State {
  alignas(16) unsigned char h[16];
};

// H_0.
[[nodiscard]] State Initial();

// Chunks [first, last) of `tokens`, appended to `out`, continuing from `state` (updated).
void Chunks(Path path, State& state, PromptView tokens, uint32_t chunk_tokens, uint32_t first,
            uint32_t last, std::vector<PrefixHash>& out);

// Whether the CPU runs the AES-NI and the VAES paths (tests say which they skipped).
[[nodiscard]] bool HasAesNi();
[[nodiscard]] bool HasVaes();

// One AES encryption round, aesenc's semantics, in portable code (tests compare it with the
// CPU's instruction).
void PortableAesRound(const unsigned char state[16], const unsigned char key[16],
                      unsigned char out[16]);

}  // namespace feather::aes_prefix_hash
