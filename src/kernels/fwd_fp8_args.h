// hattn/src/kernels/fwd_fp8_args.h -- what the FP8 forward launcher needs, independent of the C API.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/fwd_args.h"

namespace hattn::fwd_fp8 {

// Rows per descale block (the pre-pass's HATTN_FP8_BLOCK_ROWS): one fp32 descale per (batch,
// head, block of this many rows) of Q, K and V.
constexpr int kDescaleRows = 128;
// V^T's keys are padded to a multiple of this (and permuted inside each group, see
// sm90::e4m3_k_to_key): one k32 step of the P V wgmma, and a 16-byte TMA row stride.
constexpr int kVtKeyAlign = 32;

// Head dims whose default kernel takes P's row sums on the tensor cores (fwd_fp8::Tuning's
// kRowSumMma): the sums, and with them O's normalisation and the LSE, are of P as rounded to e4m3.
// +4-5% at d256 >= 8k (bench/RESULTS.md run 38b); at d128 -4% alone but +7% with the early exps
// (run 39c); d64's three consumers have no registers for them.
constexpr bool row_sums_of_e4m3_p(int head_dim) { return head_dim >= 128; }
// Head dims whose default kernel takes the early exps (fwd_fp8::Tuning's kEarlyExp): +7% at d128
// with the row sums above (run 39c); at d256 -2% while the lazy rescale fired in a quarter to half
// of the blocks (run 39c), +0.9-1.8% over Q in registers once P's gain made it rare (run 54f; the
// two together spill 132 bytes); no registers at d64's three consumers.
constexpr bool early_exps(int head_dim) { return head_dim >= 128; }
// ... and beside the in-kernel V transpose (Tuning::kTransposeV): at d256 the transposer warps keep
// their 24 registers only without them (with them the kernel spills), so there that kernel keeps
// the softmax's block max ahead of its exps.
constexpr bool early_exps_beside_transpose(int head_dim) { return head_dim <= 128; }
// Where the default kernels' consumer warpgroups take turns (fwd_fp8::Tuning's kPingPong and
// kSoftmaxTurns): never around the GEMM issue (run 40a: +1-6% without, at 2k-16k and d 64/128/256);
// around each softmax at d64 (run 41b: +3-7% over no turns with its three consumers, which then
// find their row maxima one after the other and so start their exps staggered), not at d128/d256
// (run 41b: -6 to -9%: there the turn holds the exps too, and the MUFU is not what they wait for).
constexpr bool fp8_softmax_turns(int head_dim) { return head_dim <= 64; }
// Q's A fragments in registers for S = Q K^T (fwd_fp8::Tuning's kQInRegisters, kQRegisterCols):
// at d256 the 64-key QK^T reads both operands from shared memory at exactly its bandwidth at the
// e4m3 rate. All of Q in registers gave +2-3.5% there (run 43a) until the early exps overtook it
// (run 54f; the two together spill); the first 128 columns of Q (16 registers) fit beside the early
// exps and gave +2.0-3.0% at 2k-16k (run 69a). At d128 all of Q is 16 registers: -0.5 to +2.6%
// there, +0.6% geomean, within the harness's noise (run 69a). d64's three consumers have no room.
constexpr bool q_in_registers(int head_dim) { return head_dim >= 128; }
// ... how many of Q's columns (0: all of them).
constexpr int kDefaultQRegisterCols = 128;
constexpr int q_register_cols(int head_dim) { return head_dim > kDefaultQRegisterCols ? kDefaultQRegisterCols : 0; }
// P's gain (log2): P in [0, 1] is quantized as e4m3(P * 2^gain), which keeps its small values out
// of e4m3's subnormals (normal from 2^-6: weights down to 2^-(6 + gain)) while P * 2^8 <= 448. The
// plain path takes kDefaultPGainLog2; the lazy path (every default kernel) takes it per call:
// every power of two below 2^8 is one more unit of headroom above a row's reference
// (sm90::LazyBlockScaledSoftmax), so fewer blocks rescale O -- and the weights below 2^-(10 + gain)
// of the reference round to 0. Rows of up to kShortRowKeys keys take 2^6: +3-9% at 2k, +1-5% at 8k,
// +1-4% at 16k, for +0.6% / +2.5% of O's RMSE at 4k / 16k on FlashAttention-3's outlier inputs
// (bench/RESULTS.md run 54d/f); longer rows keep 2^8, where the zeros add up (+19% RMSE at 64k with
// 2^6) and a rescale is rare anyway.
constexpr int kDefaultPGainLog2 = 8;
constexpr int kShortRowKeys = 16384;
constexpr int kShortRowPGainLog2 = 6;
constexpr int lazy_p_gain_log2(int seqlen_k) { return seqlen_k <= kShortRowKeys ? kShortRowPGainLog2 : kDefaultPGainLog2; }

struct Fp8FwdArgs {
    const void* q = nullptr;  // e4m3 [batch, seqlen_q, heads_q, head_dim]
    const void* k = nullptr;  // e4m3 [batch, seqlen_k, heads_kv, head_dim]
    const void* v = nullptr;  // e4m3 [batch, seqlen_k, heads_kv, head_dim]
    void* o = nullptr;        // bf16/fp16 [batch, seqlen_q, heads_q, head_dim]
    float* lse = nullptr;     // optional [batch, heads_q, seqlen_q]
    const float* q_descale = nullptr;  // [batch, heads_q, ceil(seqlen_q / 128)]
    const float* k_descale = nullptr;  // [batch, heads_kv, ceil(seqlen_k / 128)]
    const float* v_descale = nullptr;  // [batch, heads_kv, ceil(seqlen_k / 128)]
    void* vt = nullptr;       // V^T, e4m3 [batch, heads_kv, head_dim, vt_keys(seqlen_k)]: the workspace
                              // the launcher transposes v into, or (v_transposed) the caller's V^T
    bool v_transposed = false;  // vt already holds V^T (HATTN_FWD_FP8_V_TRANSPOSED): no transpose pass
    int batch = 0, heads_q = 0, heads_kv = 0, seqlen_q = 0, seqlen_k = 0, head_dim = 0;
    // Strides in elements (bytes for the e4m3 tensors); head_dim is contiguous.
    int64_t q_batch_stride = 0, q_seq_stride = 0, q_head_stride = 0;
    int64_t k_batch_stride = 0, k_seq_stride = 0, k_head_stride = 0;
    int64_t v_batch_stride = 0, v_seq_stride = 0, v_head_stride = 0;
    int64_t o_batch_stride = 0, o_seq_stride = 0, o_head_stride = 0;
    fwd::Dtype o_dtype = fwd::Dtype::kBf16;
    float softmax_scale = 0.f;  // resolved (never 0 here)
    bool causal = false;
    int grid_ctas = 0;          // CTAs to launch: 0 = automatic (one per tile, or one per SM
                                // when tiles are short); N > 0 = at most N, walking the tiles
    int section_heads = 0;      // (head, batch) pairs per tile-order section (sm90::TileScheduler):
                                // 0 = automatic, N > 0 = N (A/B runs)
    void* schedule_workspace = nullptr;  // optional: fwd::kWorkspaceBytes of zero-filled device memory
                                // (aligned to fwd::kWorkspaceAlign), left zero-filled by every call;
                                // with it causal problems take their tiles from a counter
                                // (dynamic_causal_min_seqlen_k, fwd_fp8.cuh)
};

// V^T's row length (keys) and its byte size.
HATTN_HOST_DEVICE constexpr int64_t vt_keys(int seqlen_k) { return (static_cast<int64_t>(seqlen_k) + kVtKeyAlign - 1) / kVtKeyAlign * kVtKeyAlign; }
constexpr int64_t vt_bytes(int batch, int heads_kv, int seqlen_k, int head_dim) {
    return static_cast<int64_t>(batch) * heads_kv * head_dim * vt_keys(seqlen_k);
}

}  // namespace hattn::fwd_fp8
