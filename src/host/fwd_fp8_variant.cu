// hattn/src/host/fwd_fp8_variant.cu -- one FP8 forward kernel variant (src/host/fwd_fp8_variants.h)
// for one head dim, bf16 O. Compiled once per built pair with
//   -DHATTN_FP8_VARIANT=<a name in kFp8Variants, unquoted> -DHATTN_FP8_VARIANT_HEAD_DIM=<64|128|256>
// (one translation unit each, so the builds of the kernels run in parallel).
#include "host/fwd_fp8_variants.h"
#include "kernels/fwd_fp8.cuh"

namespace hattn::host {

namespace {
#define HATTN_FP8_STRINGIZE(x) HATTN_FP8_STRINGIZE_(x)
#define HATTN_FP8_STRINGIZE_(x) #x
constexpr int kVariant = fp8_variant_index(HATTN_FP8_STRINGIZE(HATTN_FP8_VARIANT));
static_assert(kVariant >= 0, "HATTN_FP8_VARIANT names no entry of kFp8Variants");
constexpr int kHeadDim = HATTN_FP8_VARIANT_HEAD_DIM;
constexpr Fp8VariantInfo kInfo = kFp8Variants[kVariant];
static_assert(fp8_variant_built(kVariant, kHeadDim), "CMake builds only the pairs fp8_variant_built allows");
using Opt = fwd_fp8::Tuning<kInfo.lazy_rescale, kInfo.two_level, kInfo.row_sum_mma, kInfo.two_p_buffers,
                            kInfo.early_exp, kInfo.ping_pong, kInfo.softmax_turns, kInfo.transpose_v,
                            kInfo.q_in_registers, kInfo.p_gain_log2, kInfo.o_halves_d256,
                            kInfo.q_register_cols>;
constexpr int kBlockN = kInfo.block_n > 0 ? kInfo.block_n : fwd_fp8::default_block_n(kHeadDim);
constexpr int kStages = kInfo.stages > 0 ? kInfo.stages : fwd_fp8::default_stages(kHeadDim);
using Cfg = fwd_fp8::Config<kHeadDim, sm90::Bf16, kInfo.consumers, kBlockN, kStages, Opt>;
}  // namespace

template <>
cudaError_t launch_fwd_fp8_variant<kVariant, kHeadDim>(const fwd_fp8::Fp8FwdArgs& args, cudaStream_t stream,
                                                       std::string* error) {
    if (args.o_dtype != fwd::Dtype::kBf16) {
        if (error) *error = "FP8 forward variants are built for bf16 O only";
        return cudaErrorNotSupported;
    }
    return fwd_fp8::launch_fwd_fp8<Cfg>(args, stream, error);
}

}  // namespace hattn::host
