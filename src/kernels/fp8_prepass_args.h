// hattn/src/kernels/fp8_prepass_args.h -- what the FP8 pre-pass launcher needs, independent of the C
// API, and the one definition of the Hadamard signs that the kernel and the float64 reference share.
#pragma once

#include <cstdint>

#include "kernels/fwd_args.h"  // Dtype, HATTN_HOST_DEVICE


namespace hattn::fp8 {

// Rows per quantization block (include/hattn.h: HATTN_FP8_BLOCK_ROWS): the FP8 kernel's query and
// key tiles.
constexpr int kBlockRows = 128;
// The largest finite e4m3 value (S.1111.110 = 1.75 * 2^8).
constexpr float kE4m3Max = 448.0f;

enum class Rope : int { kNone = 0, kInterleaved = 1, kHalf = 2 };

// One tensor of the pre-pass: a [batch, seqlen, heads, head_dim] 16-bit input, its e4m3 output and
// the [batch, heads, ceil(seqlen / kBlockRows)] descales.
struct Fp8Tensor {
    const void* in = nullptr;
    void* out = nullptr;
    float* descale = nullptr;
    int seqlen = 0, heads = 0;
    int64_t in_batch_stride = 0, in_seq_stride = 0, in_head_stride = 0;     // elements
    int64_t out_batch_stride = 0, out_seq_stride = 0, out_head_stride = 0;  // bytes (= elements)
    int rope_offset = 0;  // table row of sequence row 0
    // > 0 (V only, HATTN_FP8_PREPASS_V_TRANSPOSED): `out` is V^T for the FP8 forward, e4m3
    // [batch, heads, head_dim, vt_keys] in its key order (kernels/fwd_fp8.cuh), and the out strides
    // are that layout's (batch: heads * head_dim * vt_keys bytes, head: head_dim * vt_keys).
    int64_t vt_keys = 0;
    // V only, HATTN_FP8_PREPASS_V_PER_HEAD: every descale entry holds, when the quantizer starts, its
    // head's amax (launch_v_head_amax wrote it), which the quantizer takes instead of its block's and
    // then overwrites with the descale, amax / 448.
    bool amax_given = false;
};

// The kernel's thread layout (kernels/fp8_prepass.cuh: Layout): 16-byte chunks of a row per thread
// (2, 4 or 8) and 128-row blocks per thread block (1, or 4 staged through shared memory). 0: the
// default for the head dim. The C API always takes the defaults; tests and the A/B benchmark pick.
struct Fp8PrepassVariant {
    int chunks = 0;
    int blocks_per_cta = 0;
    // The tensor-core kernel only: thread blocks sharing one 128-row block (0 or 1: one; 2: a
    // cluster of two, 64 rows each, "16x1x2"; built at d = 256, elsewhere it runs the single kind).
    int ctas_per_block = 0;
    // Where Q and K take one launch and V another (the tensor-core Hadamard; V^T after a
    // transform): 1 launches V's as a programmatic dependent of Q's and K's, so that V's thread
    // blocks take the SMs as the last Q / K thread blocks retire (a plain launch waits for the whole
    // grid, then starts), and V's launch is set up while Q and K run; 0: the plain launch. The
    // default (a variant of all 0s) overlaps behind the tensor-core Hadamard, where it was
    // measured (fp8_default_variant); a named variant overlaps only with the fourth field
    // ("<chunks>x<blocks>x<ctas>x1"), so "16x1x1" is the plain launch to A/B against.
    int v_overlap = 0;
};

// chunks = kFp8MmaChunks names the tensor-core Hadamard (kernels/fp8_prepass.cuh:
// fp8_hadamard_mma_kernel: 4 of the Hadamard's column bits by mma.sync) for Q and K; it exists for
// the Hadamard (with or without RoPE), and blocks per thread block do not apply to it (its walk is
// one contiguous range per thread block).
constexpr int kFp8MmaChunks = 16;
constexpr int kFp8MmaPairCtas = 2;  // Fp8PrepassVariant::ctas_per_block of the paired variant
// Head dims whose tensor-core kernel is also built in pairs (the A/B variant "16x1x2"): d = 256, the
// one whose single thread block of 16 warps is the whole SM (kernels/fp8_prepass.cuh: MmaLayout).
constexpr bool fp8_mma_pair_built(int head_dim) { return head_dim == 256; }

constexpr int kFp8StagedBlocks = 4;  // blocks per thread block of the staged variants
// The layout a call gets unless it names one: the fastest per head dim and transform in the A/B of
// bench/RESULTS.md run 26 (H200, 16k and 64k tokens, % of the copy bandwidth at 64k):
//   quantize only      2 chunks x 4 staged blocks at d 64 / 128 (87 / 95%), 4 x 4 at 256 (96%)
//   Hadamard           the tensor-core kernel (kFp8MmaChunks) at every head dim, run 35 (% of
//                      copy at 64k: 88 / 90 / 92 at d 64 / 128 / 256; the butterfly layouts'
//                      best were 2 x 4 at d 64 (83%), 4 x 4 at 128 (81%), 8 x 4 at 256 (71%))
//   RoPE + Hadamard    the tensor-core kernel too, run 36 (RoPE in fp32 rounded to bf16 for the
//                      mma; % of copy at 64k: 79 / 80 / 72 at d 64 / 128 / 256; the butterfly
//                      layouts' best 54 / 57 / 54: 2 x 1 at d 64 / 128, 4 x 1 at 256); at d 256
//                      on cluster pairs (16x1x2), run 45c: 77.0 / 75.8% (half / interleaved) at
//                      64k against 71.1% for one thread block per block (tests and sanitizers on
//                      the GPU: run 51)
//   RoPE only          2 x 1 at d 64 / 128, 4 x 1 at 256 (the butterfly kernels without the transform)
// (Without the Hadamard one launch quantizes Q, K and V -- two with RoPE and V^T out, V's then
// plain: the butterfly kernels let no dependent start early, and it was not measured. With it the
// transform is Q's and K's, and V's quantizer is a second launch, overlapped with the first
// (v_overlap): run 71a, H100, % of the copy at 16k / 64k tokens +6.2-9.0 / +1.2-3.3 points with
// RoPE, +4.9-7.1 / +1.4-2.3 without.)
constexpr Fp8PrepassVariant fp8_default_variant(int head_dim, Rope rope, bool hadamard) {
    if (hadamard) return {kFp8MmaChunks, 1, fp8_mma_pair_built(head_dim) && rope != Rope::kNone ? kFp8MmaPairCtas : 0, 1};
    if (rope != Rope::kNone) return {head_dim == 256 ? 4 : 2, 1};
    return {head_dim == 256 ? 4 : 2, kFp8StagedBlocks};
}

// Whether a variant is instantiated (kernels/fp8_prepass.cuh: variant_built): the others spill
// under d = 256's 128-register cap (512 threads), and a call for one runs the same chunks with one
// block per thread block where that is built, else chunks 8 with one block.
constexpr bool fp8_variant_built(int head_dim, int chunks, int blocks_per_cta, Rope rope, bool hadamard) {
    if (chunks == kFp8MmaChunks) return hadamard && blocks_per_cta == 1;
    if (head_dim != 256) return true;
    const bool rope_only = rope != Rope::kNone && !hadamard;
    if (chunks == 4) {  // 4-64 bytes of spills
        return blocks_per_cta == 1 ? !rope_only : rope != Rope::kInterleaved;
    }
    if (chunks == 2 || chunks == 8) return blocks_per_cta == 1 || rope == Rope::kNone;  // 4-88 bytes
    return true;
}
// What a call for (chunks, blocks_per_cta[, ctas_per_block]) runs: {chunks, blocks} of the fallback
// above (a pair where it is built, else one thread block per block).
constexpr Fp8PrepassVariant fp8_variant_run(int head_dim, int chunks, int blocks_per_cta, Rope rope, bool hadamard,
                                            int ctas_per_block = 0) {
    if (fp8_variant_built(head_dim, chunks, blocks_per_cta, rope, hadamard)) {
        // 0 CTAs per block: the default's (a pair for d = 256's RoPE + Hadamard).
        const int ctas = ctas_per_block != 0 ? ctas_per_block : fp8_default_variant(head_dim, rope, hadamard).ctas_per_block;
        const bool pair = chunks == kFp8MmaChunks && ctas == kFp8MmaPairCtas && fp8_mma_pair_built(head_dim);
        return {chunks, blocks_per_cta, pair ? kFp8MmaPairCtas : 0};
    }
    if (chunks == kFp8MmaChunks) return fp8_default_variant(head_dim, rope, hadamard);
    if (fp8_variant_built(head_dim, chunks, 1, rope, hadamard)) return {chunks, 1};
    return {8, 1};
}

struct Fp8PrepassArgs {
    Fp8Tensor q, k, v;
    int batch = 0, head_dim = 0;
    fwd::Dtype dtype = fwd::Dtype::kBf16;
    Rope rope = Rope::kNone;
    bool hadamard = false;
    uint64_t hadamard_seed = 0;
    const float* rope_cos = nullptr;  // [rows, head_dim / 2] fp32
    const float* rope_sin = nullptr;
    Fp8PrepassVariant variant;
};

// splitmix64: a counter-based hash, so every column's sign is a pure function of (seed, column).
HATTN_HOST_DEVICE inline uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// 1 where column c of the Hadamard transform's diagonal D is -1.
HATTN_HOST_DEVICE inline uint32_t hadamard_sign_bit(uint64_t seed, int column) {
    return static_cast<uint32_t>(splitmix64(seed + static_cast<uint64_t>(column)) >> 63);
}

}  // namespace hattn::fp8

namespace hattn::fp8 {

// The d signs of D as bits (the launcher orders them per lane: make_lane_signs in
// kernels/fp8_prepass.cuh), computed once on the host per launch and passed as a kernel
// parameter: hashing in the kernel costs a 64-bit splitmix64 (about twenty integer instructions)
// per column per thread, as much as the whole transform.
constexpr int kMaxHeadDim = 256;
constexpr int kSignWordBits = 32;
struct HadamardSigns {
    uint32_t words[kMaxHeadDim / kSignWordBits] = {};
};

}  // namespace hattn::fp8
