// hattn/test/reference_test_util.h -- what the CPU tests of the references (reference_test.cpp,
// reference_bwd_test.cpp) share: copies of packed tensors in other layouts.
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

namespace hattn::test {

// A packed [batch, seqlen, heads, d] tensor copied to head-major [batch, heads, seqlen, d + pad],
// the padding NaN (a reference that reads it returns NaN).
inline std::vector<float> to_bhsd(const std::vector<float>& x, int batch, int seqlen, int heads, int d, int pad) {
    std::vector<float> y(static_cast<size_t>(batch) * heads * seqlen * (d + pad), std::nanf(""));
    for (int b = 0; b < batch; ++b)
        for (int s = 0; s < seqlen; ++s)
            for (int h = 0; h < heads; ++h)
                for (int c = 0; c < d; ++c)
                    y[((static_cast<size_t>(b) * heads + h) * seqlen + s) * (d + pad) + c] =
                        x[((static_cast<size_t>(b) * seqlen + s) * heads + h) * d + c];
    return y;
}

}  // namespace hattn::test
