// hattn/bench/fwd_fp8_accuracy_ab.cu -- what the FP8 forward's kernel variants (src/host/fwd_fp8_variants.h)
// cost or buy in accuracy, against the sequence length: FlashAttention-3's Table 3 measurement
// (testing/fp8_accuracy.h: Q, K, V ~ N(0, 1) + N(0, 100) x Bernoulli(0.001), RMSE of O against the
// float64 attention of the unquantized bf16 inputs) with every named variant run on the same
// quantized inputs as the library's own kernel, per head dim and sequence length.
//
//   fwd_fp8_accuracy_ab [--variants base,twolevel,...] [--head-dims 128] [--seqlens 4096,16384,65536,131072]
//                       [--rows 1024] [--heads 4]
//
// The question it answers (issue 10): Hopper's e4m3 wgmma accumulates P V with fewer bits than
// fp32, so long rows could lose accuracy in O; two-level accumulation (Tuning::kTwoLevel: each
// block's P V into a fresh accumulator, added to O in fp32) is the remedy, at a price in speed
// (bench/fwd_fp8_ab). Prints, per (head dim, seqlen), each kernel's RMSE under (a) one scale per
// tensor, (b) the pre-pass's block scales, (c) block scales + Hadamard, and (c)'s ratio to the
// library kernel's. Exit status 1 on a CUDA or API error, 2 on bad arguments.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "comma_list.h"
#include "hattn.h"
#include "host/fwd_fp8_variants.h"
#include "testing/fp8_accuracy.h"

namespace {

using hattn::host::kFp8Variants;

constexpr int kExitBadArgs = 2;

using hattn::bench::split_commas;

struct Options {
    std::vector<int> variants;
    std::vector<int> head_dims{128};
    std::vector<int> seqlens{4096, 16384, 65536, 131072};
    int rows = 1024, heads = 4;
};

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (i + 1 >= argc) {
            std::fprintf(stderr, "%s needs a value\n", a.c_str());
            std::exit(kExitBadArgs);
        }
        const std::string value = argv[++i];
        std::vector<int> ints;
        for (const std::string& x : split_commas(value)) ints.push_back(std::atoi(x.c_str()));
        if (a == "--variants") {
            for (const std::string& name : split_commas(value)) {
                const int v = hattn::host::fp8_variant_index(name.c_str());
                if (v < 0) {
                    std::fprintf(stderr, "unknown variant %s\n", name.c_str());
                    std::exit(kExitBadArgs);
                }
                o.variants.push_back(v);
            }
        } else if (a == "--head-dims") {
            o.head_dims = ints;
        } else if (a == "--seqlens") {
            o.seqlens = ints;
        } else if (a == "--rows") {
            o.rows = std::atoi(value.c_str());
        } else if (a == "--heads") {
            o.heads = std::atoi(value.c_str());
        } else {
            std::fprintf(stderr, "unknown argument %s\n", a.c_str());
            std::exit(kExitBadArgs);
        }
    }
    if (o.variants.empty()) o.variants.push_back(hattn::host::fp8_variant_index("twolevel"));
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    const Options opt = parse(argc, argv);
    std::printf("FP8 accuracy of kernel variants: RMSE of O vs float64 of the unquantized inputs "
                "(%d heads, %d rows per head); (a) per-tensor, (b) block, (c) block + Hadamard\n",
                opt.heads, opt.rows);
    std::printf("| d | seqlen | kernel | (a) | (b) | (c) | (c) / library (c) |\n|---:|---:|---|---:|---:|---:|---:|\n");
    for (int d : opt.head_dims) {
        // The variants built for this head dim.
        std::vector<int> here;
        for (int v : opt.variants)
            if (hattn::host::fp8_variant_built(v, d)) here.push_back(v);
        for (int seqlen : opt.seqlens) {
            hattn::testing::Fp8AccuracyConfig c;
            c.heads = opt.heads;
            c.seqlen = seqlen;
            c.head_dim = d;
            c.rows_per_head = opt.rows;
            for (int v : here)
                c.extra_forwards.push_back([v](const hattn_fwd_fp8_params* p, cudaStream_t s) {
                    return hattn::host::fwd_fp8_variant(v, p, s);
                });
            hattn::testing::Fp8AccuracyResult r;
            std::string error;
            if (!hattn::testing::measure_fp8_accuracy(c, &r, &error)) {
                std::fprintf(stderr, "d%d s%d: %s\n", d, seqlen, error.c_str());
                return 1;
            }
            std::printf("| %d | %d | library | %.3e | %.3e | %.3e | 1 |\n", d, seqlen, r.rmse_per_tensor, r.rmse_block,
                        r.rmse_block_hadamard);
            for (size_t i = 0; i < here.size(); ++i)
                std::printf("| %d | %d | %s | %.3e | %.3e | %.3e | %.3f |\n", d, seqlen, kFp8Variants[here[i]].name,
                            r.extra_per_tensor[i], r.extra_block[i], r.extra_block_hadamard[i],
                            r.extra_block_hadamard[i] / r.rmse_block_hadamard);
            std::fflush(stdout);
        }
    }
    return 0;
}
