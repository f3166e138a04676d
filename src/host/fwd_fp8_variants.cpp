// hattn/src/host/fwd_fp8_variants.cpp -- dispatch of the FP8 forward variants (fwd_fp8_variants.h).
#include "host/fwd_fp8_variants.h"

#include <array>
#include <string>
#include <utility>

#include "host/fwd_fp8_launch.h"

namespace hattn::host {

namespace {

template <int kVariant, int kHeadDim>
cudaError_t launch_if_built(const fwd_fp8::Fp8FwdArgs& args, cudaStream_t stream, std::string* error) {
    if constexpr (fp8_variant_built(kVariant, kHeadDim)) {
        return launch_fwd_fp8_variant<kVariant, kHeadDim>(args, stream, error);
    } else {
        if (error) *error = std::string("FP8 forward variant ") + kFp8Variants[kVariant].name + " is not built for this head_dim";
        return cudaErrorNotSupported;
    }
}

template <int kVariant>
cudaError_t launch_variant(const fwd_fp8::Fp8FwdArgs& args, cudaStream_t stream, std::string* error) {
    switch (args.head_dim) {
        case 64: return launch_if_built<kVariant, 64>(args, stream, error);
        case 128: return launch_if_built<kVariant, 128>(args, stream, error);
        case 256: return launch_if_built<kVariant, 256>(args, stream, error);
        default: return cudaErrorInvalidValue;  // unreachable after validation
    }
}

template <int... kVariants>
constexpr auto make_launch_table(std::integer_sequence<int, kVariants...>) {
    return std::array<Fp8Launch, sizeof...(kVariants)>{&launch_variant<kVariants>...};
}

constexpr auto kLaunches = make_launch_table(std::make_integer_sequence<int, kFp8VariantCount>{});

cudaError_t bad_variant(const fwd_fp8::Fp8FwdArgs&, cudaStream_t, std::string* error) {
    if (error) *error = "no such FP8 forward variant";
    return cudaErrorInvalidValue;
}

}  // namespace

hattn_status fwd_fp8_variant(int variant, const hattn_fwd_fp8_params* params, cudaStream_t stream, int grid_ctas,
                             int section_heads) {
    const bool known = variant >= 0 && variant < kFp8VariantCount;
    return fwd_fp8_with_launch(params, stream, known ? kLaunches[variant] : bad_variant, grid_ctas, section_heads);
}

}  // namespace hattn::host
