// hattn/src/host/fwd_fp8_variants.h -- kernel variants of the FP8 forward for A/B measurements
// (not part of libhattn): the softmax and accumulation options of fwd_fp8::Tuning, each
// instantiated for bf16 O at head dims 64, 128 and 256 in a library of its own
// (hattn_fp8_variants, CMake option HATTN_FP8_VARIANTS), run through hattn_fwd_fp8's own checks.
// Used by test/fwd_fp8_test.cu (each variant against float64) and bench/fwd_fp8_ab.cu (speed).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "hattn.h"
#include "kernels/fwd_fp8_args.h"

namespace hattn::host {

struct Fp8VariantInfo {
    const char* name;
    bool lazy_rescale;  // fwd_fp8::Tuning's options
    bool two_level;
    int block_n = 0;  // KV block width, 0: the head dim's default (fwd_fp8::default_block_n)
    int stages = 0;   // K/V ring slots, 0: the default (fwd_fp8::default_stages)
    bool row_sum_mma = false;  // P's row sums on the tensor cores (fwd_fp8::Tuning::kRowSumMma)
    bool two_p_buffers = false;  // P's fragment in two register sets (fwd_fp8::Tuning::kTwoPBuffers)
    int consumers = 2;           // consumer warpgroups of 64 query rows (3: 192-row tiles, 160 registers)
    bool early_exp = false;      // exps before the block max is known (fwd_fp8::Tuning::kEarlyExp)
    bool ping_pong = true;       // the consumers take turns on the tensor cores (fwd_fp8::Tuning::kPingPong)
    bool softmax_turns = false;  // ... around each softmax instead (fwd_fp8::Tuning::kSoftmaxTurns)
    bool transpose_v = false;    // V's rows transposed inside the kernel (fwd_fp8::Tuning::kTransposeV)
    int max_head_dim = 0;        // > 0: built only up to this head dim (fp8_variant_built's rule otherwise)
    bool q_in_registers = false;  // Q's A fragments in registers, S by RS wgmma (fwd_fp8::Tuning::kQInRegisters)
    int p_gain_log2 = 0;          // P's gain fixed (log2; fwd_fp8::Tuning::kPGainLog2), 0: by the rows' length
    bool o_halves_d256 = false;   // d256's O stored in halves, two Q slots (fwd_fp8::Tuning::kOHalvesD256)
    int q_register_cols = 0;      // q_in_registers: only Q's first columns (fwd_fp8::Tuning::kQRegisterCols), 0: all
};

// Index 0 is the plain path (Tuning<>); the library's default (fwd_fp8::DefaultTuning) is
// "lazy_rowsum_early_noturn_q128" at d = 128 and 256 (since run 69a; before it the same without Q
// in registers, "lazy_rowsum_early_noturn") and "lazy_p2_c3_sturn" at 64.
// (The MUFU + FMA-pipe exp split, measured in run 26, lost and is gone; so are the 192-key blocks of
// run 37a, +1.5% over lazy but 7% under the default, which came to spill 72 bytes, and three
// consumers on 64-key blocks at d128, 5-13% under the default in run 51b; so is _ot, the next
// tile's first QK^T under the epilogue at d128, 1-3% under the default in run 52b; so are two
// probes of P V 16 columns wider than head_dim (zero or one rows after V^T): _pv16, the wgmma rate
// of wider chains (run 38d), and _pvsum, P's row sums as those pad columns, +2-4% but its sums
// chained across blocks lose the small weights past ~1k keys, run 43a: rel L2 0.07 at 4k.)
// _rowsum: P's row sums on the tensor cores (P times a tile of ones beside each P V), no FADD per weight.
// _p2: P's fragment in two register sets, written straight from the softmax. _c3: three consumer
// warpgroups (192-row tiles) at d64, whose exps take twice its GEMMs' time: one more softmax in
// flight per SM (lazy alone and with the row sums spill 12 / 60 bytes there; with _p2 it fits).
// _early: the steady state's exps taken against the
// rows' current references while the block max is found beside them (Tuning::kEarlyExp), on
// lazy and on lazy_rowsum (on lazy_p2_c3 it spills 104 bytes, 620 without turns). _noturn: no
// ping-pong turns between the consumers (the default at every head dim since run 40a; lazy_rowsum
// with three consumers still spills 88 bytes without them). _sturn: the turns around each softmax
// instead of each GEMM issue (Tuning::kSoftmaxTurns). Where the exps come after the block max
// (not _early), ptxas sinks them below the turn's arrive, so the turn orders the warpgroups' row
// maxima and their exps follow one another; with _early the turn holds the exps (run 41b: d64 c3
// +3-7%, the default there since; d128 / d256 -6 to -9%). _tv: the head dims' defaults with V's rows
// transposed inside the kernel by the producer warpgroup (Tuning::kTransposeV; given V^T, they run
// their base variant's kernel).
// _qreg: Q's A fragments in registers, S = Q K^T as an RS wgmma (Tuning::kQInRegisters), on the d256
// default: shared memory then serves K alone to the QK^T GEMMs (with the d128 default's early exps
// it spills 8 bytes, at d256 132); the d256 default from run 43a until the early exps overtook it
// (run 54f: +0.9-1.8%) (with the in-kernel transpose Q stays in shared memory: in registers it
// spills 24 bytes beside the transposers, Tuning::WithTransposeV). Since then it came to spill 12
// bytes at d256 itself (found in run 61), so both _qreg variants are built up to d128 only (where,
// since run 68e, all of Q is 16 registers and the tile hand-off is kept beside it).
// _g8, _g7: the head dims' defaults (at d256 its previous one, _qreg) with P's gain fixed at 2^8 /
// 2^7 (Tuning::kPGainLog2) instead of by the rows' length (fwd_fp8::lazy_p_gain_log2: 2^6 up to
// 16k keys): 0.75 / 1.75 of headroom above a lazy reference instead of 2.75, so a warp's O
// rescales (and, with _early, its weights' fix) in about half the blocks of a 2k row at 2^8 (run
// 54d: 2^6 +5-8% there).
// _q128, _q64: lazy_rowsum_early_noturn (early exps) with the first 128 / 64 columns of Q in registers
// (Tuning::kQRegisterCols; all of Q where head_dim is no wider): the rest of each QK^T an SS wgmma.
// At d256 half of Q (16 registers) fits beside the early exps and the tile hand-off, where all of it
// spills 132 bytes; at d128 all of Q fits beside them too (CUDA 13.0). By the count of _qreg (run
// 43a: +2.1-3.6% at d256 for a quarter of a step's shared-memory reads), _q128 takes an eighth away.
// (_q64 at d256, a quarter of Q, spills 20 bytes where _q128 spills none: built up to d128 only.)
// _q128 is the d128 / d256 default since run 69a (d256 +2.0-3.0%, d128 -0.5 to +2.6%).
// _oh: the d256 default with O stored in halves and two Q slots (Tuning::kOHalvesD256; the same
// kernel as its base below d256): level with it, -0.4 to +0.7% at 1k-8k (run 62c). (The defaults
// with 1 n8 column group of 16, 8 or 4 exponentiated on the FMA pipe, _fma16 / _fma8 / _fma4, lost
// 0.3-8% in run 62c and are gone. So is _sq, the d128 default with S = Q K^T issued as two groups of
// 64 columns so the lower half's max and exps ran while the upper half was on the tensor cores
// (ptxas kept them there only behind a loop as a basic-block boundary): 2.4-5.1% slower at 1k-16k,
// full and causal, run 63b.)
inline constexpr Fp8VariantInfo kFp8Variants[] = {
    {"base", false, false},
    {"lazy", true, false},
    {"twolevel", false, true, 0, 0, false, false, 2, false, true, false, false, 64},  // spills 20 bytes at d128
    {"lazy_twolevel", true, true, 0, 0, false, false, 2, false, true, false, false, 64},  // spills 4 bytes at d128
    {"lazy_rowsum", true, false, 0, 0, true},
    {"lazy_twolevel_rowsum", true, true, 0, 0, true},
    {"lazy_p2", true, false, 0, 0, false, true},
    {"lazy_twolevel_p2", true, true, 0, 0, false, true},
    {"lazy_rowsum_p2", true, false, 0, 0, true, true},
    {"lazy_p2_c3", true, false, 0, 0, false, true, 3},
    {"lazy_early", true, false, 0, 0, false, false, 2, true},
    {"lazy_rowsum_early", true, false, 0, 0, true, false, 2, true},
    {"lazy_early_noturn", true, false, 0, 0, false, false, 2, true, false},
    {"lazy_rowsum_early_noturn", true, false, 0, 0, true, false, 2, true, false},
    {"lazy_rowsum_noturn", true, false, 0, 0, true, false, 2, false, false},
    {"lazy_p2_c3_noturn", true, false, 0, 0, false, true, 3, false, false},
    {"lazy_rowsum_early_sturn", true, false, 0, 0, true, false, 2, true, true, true},
    {"lazy_rowsum_sturn", true, false, 0, 0, true, false, 2, false, true, true},
    {"lazy_p2_c3_sturn", true, false, 0, 0, false, true, 3, false, true, true},
    {"lazy_rowsum_early_noturn_tv", true, false, 0, 0, true, false, 2, true, false, false, true, 128},
    {"lazy_rowsum_noturn_tv", true, false, 0, 0, true, false, 2, false, false, false, true},
    {"lazy_p2_c3_sturn_tv", true, false, 0, 0, false, true, 3, false, true, true, true},
    {"lazy_rowsum_noturn_qreg", true, false, 0, 0, true, false, 2, false, false, false, false, 128, true},
    {"lazy_rowsum_early_noturn_g8", true, false, 0, 0, true, false, 2, true, false, false, false, 128, false, 8},
    {"lazy_rowsum_early_noturn_g7", true, false, 0, 0, true, false, 2, true, false, false, false, 128, false, 7},
    {"lazy_rowsum_noturn_qreg_g8", true, false, 0, 0, true, false, 2, false, false, false, false, 128, true, 8},
    {"lazy_p2_c3_sturn_g8", true, false, 0, 0, false, true, 3, false, true, true, false, 0, false, 8},
    {"lazy_rowsum_early_noturn_oh", true, false, 0, 0, true, false, 2, true, false, false, false, 0, false, 0, true},
    {"lazy_rowsum_early_noturn_q128", true, false, 0, 0, true, false, 2, true, false, false, false, 0, true, 0, false, 128},
    {"lazy_rowsum_early_noturn_q64", true, false, 0, 0, true, false, 2, true, false, false, false, 128, true, 0, false, 64},
};
inline constexpr int kFp8VariantCount = static_cast<int>(sizeof(kFp8Variants) / sizeof(kFp8Variants[0]));

// Whether `text` holds exactly `name` up to its end or a ':' (a list entry; usable in constant expressions).
constexpr bool names_entry(const char* name, const char* text) {
    int i = 0;
    while (name[i] != '\0' && text[i] == name[i]) ++i;
    return name[i] == '\0' && (text[i] == '\0' || text[i] == ':');
}

// The index of the variant named `name`, -1 if none.
constexpr int fp8_variant_index(const char* name) {
    for (int v = 0; v < kFp8VariantCount; ++v)
        if (names_entry(kFp8Variants[v].name, name)) return v;
    return -1;
}

// HATTN_FP8_VARIANT_SUBSET (from CMake's cache variable of that name, for A/B builds): the names of
// the variants built, separated by ':'; base (index 0) always is. Not defined: every variant.
#ifdef HATTN_FP8_VARIANT_SUBSET
#define HATTN_FP8_SUBSET_STRING_(...) #__VA_ARGS__
#define HATTN_FP8_SUBSET_STRING(...) HATTN_FP8_SUBSET_STRING_(__VA_ARGS__)
inline constexpr const char kFp8VariantSubset[] = HATTN_FP8_SUBSET_STRING(HATTN_FP8_VARIANT_SUBSET);
#else
inline constexpr const char kFp8VariantSubset[] = "";
#endif

// Whether variant `variant` is in kFp8VariantSubset (an empty subset holds every variant).
constexpr bool fp8_variant_in_subset(int variant) {
    if (variant == 0 || kFp8VariantSubset[0] == '\0') return true;
    for (int start = 0; kFp8VariantSubset[start] != '\0';) {
        if (names_entry(kFp8Variants[variant].name, kFp8VariantSubset + start)) return true;
        while (kFp8VariantSubset[start] != ':' && kFp8VariantSubset[start] != '\0') ++start;
        if (kFp8VariantSubset[start] == ':') ++start;
    }
    return false;
}

// Two-level accumulation needs a second O in registers, and 192-key blocks 96 registers of S: neither
// is built at head_dim 256 (O alone is 128 registers there), and both together only at head_dim 64
// (at 128 they spill; so does two-level with the row sums' 6 registers); three consumers (160
// registers each) only at 64; lazy_twolevel only at 64 since it spilled 4 bytes at 128 (CUDA 13.0,
// main 9a9a847: no kernel change, ptxas's allocation), twolevel too since the tile hand-off's four
// words (20 bytes at 128, main 0ec7a94), and lazy_rowsum_early_noturn_tv up to 128
// (its transposers spill at d256's 24 registers). CMakeLists.txt builds the same pairs.
constexpr bool fp8_variant_built(int variant, int head_dim) {
    const Fp8VariantInfo& v = kFp8Variants[variant];
    const bool two_level_plus = v.two_level && (v.block_n > 128 || v.row_sum_mma);
    const int max_head_dim = v.max_head_dim > 0                                     ? v.max_head_dim
                             : two_level_plus || v.consumers == 3                   ? 64
                             : v.two_level || v.block_n > 128                       ? 128
                                                                                 : 256;
    return head_dim <= max_head_dim && fp8_variant_in_subset(variant);
}

// One (variant, head dim) kernel's launch; defined in src/host/fwd_fp8_variant.cu, which is
// compiled once per built pair.
template <int kVariant, int kHeadDim>
cudaError_t launch_fwd_fp8_variant(const fwd_fp8::Fp8FwdArgs& args, cudaStream_t stream, std::string* error);

// hattn_fwd_fp8 with variant `variant`'s kernels (bf16 O only): the same checks and statuses; a
// variant index out of range, fp16 O or a head dim the variant is not built for fails at the launch
// (a CUDA error status, the reason in the log). grid_ctas, section_heads: as fwd_fp8_with_launch's.
hattn_status fwd_fp8_variant(int variant, const hattn_fwd_fp8_params* params, cudaStream_t stream, int grid_ctas = 0,
                             int section_heads = 0);

}  // namespace hattn::host
