// hattn/src/cli/accuracy_fp8.cu -- `hattn accuracy-fp8`: the accuracy table of FlashAttention-3's
// Table 3 for hattn's FP8 forward (testing::measure_fp8_accuracy does the work), and the same
// error against the sequence length.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_common.h"
#include "testing/fp8_accuracy.h"

namespace hattn::cli {
namespace {

// The issue's goal at seqlen 4k, d128: block scales + Hadamard within this RMSE, and this many
// times below the per-tensor baseline (FlashAttention-3 reports 9.1e-3 and 2.4e-2).
constexpr double kGoalRmse = 9e-3;
constexpr double kGoalRatio = 2.5;
constexpr int kGoalSeqlen = 4096;
constexpr int kGoalHeadDim = 128;
// The goal is read on a second d128 row with this many times the batch and the heads of the first:
// one head's RMSE moves +-20% with the draw of its inputs (the few rows where an outlier aligned in
// q and k takes the softmax dominate it), so 4 heads give a figure good to ~10% and 64 to ~3%.
constexpr int kGoalBatchFactor = 2;
constexpr int kGoalHeadsFactor = 8;

struct AccuracyOptions {
    int batch = 1;
    int heads = 4;
    int rows = 1024;      // reference rows per head, seqlen-4k table
    int long_rows = 256;  // reference rows per head, seqlen sweep
    std::vector<int> dims = {64, 128, 256};
    std::vector<int> seqlens = {4096, 16384, 65536, 131072};
    uint64_t seed = 0x5EEDull;
};

void print_accuracy_help() {
    std::printf(
        "usage: hattn accuracy-fp8 [options]\n"
        "\n"
        "The FP8 accuracy table of FlashAttention-3 (Table 3): Q, K, V ~ N(0,1) + N(0,100) * Bernoulli(0.001)\n"
        "in bf16, full attention; RMSE of O against float64 attention of the UNQUANTIZED inputs (computed\n"
        "on the GPU over --rows evenly spaced query rows of every head) for\n"
        "  bf16  hattn_fwd on the bf16 inputs (for scale)\n"
        "  (a)   e4m3 with one scale per tensor, no Hadamard (the plain FP8 baseline)\n"
        "  (b)   hattn_fp8_prepass's 128-row block scales, no Hadamard\n"
        "  (c)   block scales + random-sign Hadamard on Q and K (incoherent processing)\n"
        "all FP8 variants through hattn_fwd_fp8, and the floors: float64 attention of the e4m3 inputs of (a)\n"
        "and (c) themselves, what their rounding alone costs. First at seqlen 4096 for each --dims (batch x\n"
        "heads, and at d128 also %d x batch, %d x heads: the goal line reads that larger sample), then at d128\n"
        "against the sequence length (--seqlens, batch 1).\n"
        "\n"
        "options:\n"
        "  --batch N        batch of the seqlen-4096 rows (1)\n"
        "  --heads N        heads (4)\n"
        "  --rows N         reference rows per head at seqlen 4096 (1024)\n"
        "  --long-rows N    reference rows per head in the seqlen sweep (256)\n"
        "  --dims LIST      head dims of the seqlen-4096 table, e.g. 64,128,256\n"
        "  --seqlens LIST   the sweep's sequence lengths (4096,16384,65536,131072); 'none' skips it\n"
        "  --seed N         random seed\n"
        "  --help           this text\n"
        "\n"
        "exit status: 0 measured (the goal line says whether (c) <= %.0e and (a)/(c) >= %.1f at 4k d128),\n"
        "2 bad arguments, 3 CUDA/device error\n",
        kGoalBatchFactor, kGoalHeadsFactor, kGoalRmse, kGoalRatio);
}

std::vector<int> parse_list(const std::string& flag, const std::string& text) {
    std::vector<int> out;
    if (text == "none") return out;
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) out.push_back(parse_int(flag, item.c_str()));
    if (out.empty()) usage_error(flag + " expects a comma-separated list, got '" + text + "'");
    return out;
}

AccuracyOptions parse_accuracy(int argc, char** argv, int first) {
    AccuracyOptions o;
    for (int i = first; i < argc; ++i) {
        FlagArg flag_arg(argc, argv, i, "accuracy-fp8: ");
        const std::string& arg = flag_arg.flag;
        auto next = [&] { return flag_arg.next(); };
        if (arg == "--help" || arg == "-h") {
            print_accuracy_help();
            std::exit(kExitPass);
        } else if (arg == "--batch") {
            o.batch = parse_int(arg, next().c_str());
        } else if (arg == "--heads") {
            o.heads = parse_int(arg, next().c_str());
        } else if (arg == "--rows") {
            o.rows = parse_int(arg, next().c_str());
        } else if (arg == "--long-rows") {
            o.long_rows = parse_int(arg, next().c_str());
        } else if (arg == "--dims") {
            o.dims = parse_list(arg, next());
        } else if (arg == "--seqlens") {
            o.seqlens = parse_list(arg, next());
        } else if (arg == "--seed") {
            o.seed = static_cast<uint64_t>(std::strtoull(next().c_str(), nullptr, 0));
        } else {
            usage_error("accuracy-fp8: unknown argument '" + arg + "'");
        }
    }
    if (o.batch < 1 || o.heads < 1 || o.rows < 1 || o.long_rows < 1) {
        usage_error("accuracy-fp8: --batch, --heads, --rows and --long-rows must be >= 1");
    }
    for (int d : o.dims) {
        if (d != 64 && d != 128 && d != 256) usage_error("accuracy-fp8: --dims takes 64, 128 or 256, got " + std::to_string(d));
    }
    for (int s : o.seqlens) {
        if (s < 1) usage_error("accuracy-fp8: --seqlens must be >= 1, got " + std::to_string(s));
    }
    return o;
}

void print_row(const testing::Fp8AccuracyConfig& c, const testing::Fp8AccuracyResult& r) {
    std::printf("%7d %4d %5d %5d %6d | %9.3e | %9.3e %9.3e %9.3e %9.3e %9.3e | %6.2f | %9.3e %9.3e %6.2f | %7.1f\n",
                c.seqlen, c.head_dim, c.batch, c.heads, r.rows_per_head, r.o_rms, r.rmse_bf16, r.rmse_per_tensor,
                r.rmse_block, r.rmse_block_hadamard, r.rmse_block_hadamard_v_head,
                r.rmse_per_tensor / r.rmse_block_hadamard, r.floor_per_tensor, r.floor_block_hadamard,
                r.floor_per_tensor / r.floor_block_hadamard, r.reference_ms);
    std::fflush(stdout);
}

void print_header() {
    std::printf("%7s %4s %5s %5s %6s | %9s | %9s %9s %9s %9s %9s | %6s | %9s %9s %6s | %7s\n", "seqlen", "d", "batch",
                "heads", "rows", "O rms", "bf16", "(a) tens", "(b) block", "(c) blk+H", "(c) V/head", "(a)/(c)",
                "(a) floor", "(c) floor", "ratio", "ref ms");
}

}  // namespace

int run_accuracy_fp8(int argc, char** argv, int first) {
    const AccuracyOptions o = parse_accuracy(argc, argv, first);
    require_hopper();
    std::printf("FP8 accuracy, FlashAttention-3 Table 3 setup: Q, K, V ~ N(0,1) + N(0,100) * Bernoulli(0.001), bf16,\n"
                "full attention, softmax scale 1/sqrt(d). RMSE of O against float64 attention of the unquantized\n"
                "inputs over `rows` evenly spaced query rows per head (float64 reference on the GPU).\n"
                "(a) one e4m3 scale per tensor, no Hadamard; (b) 128-row block scales; (c) block scales + random-sign\n"
                "Hadamard on Q and K; (c) V/head: (c) with one V descale per head. FlashAttention-3 reports (a) 2.4e-2,\n"
                "(c) 9.1e-3, FP16 1.9e-4-3.2e-4. The floors: float64 attention of the e4m3 inputs of (a) and (c)\n"
                "themselves (exact P, sums and accumulation), against the same reference; 'ratio' is (a)/(c) of\n"
                "the floors, what exact attention of those inputs shows.\n\n");
    std::vector<testing::Fp8AccuracyConfig> table;
    for (int d : o.dims) {
        testing::Fp8AccuracyConfig c;
        c.batch = o.batch;
        c.heads = o.heads;
        c.seqlen = kGoalSeqlen;
        c.head_dim = d;
        c.rows_per_head = o.rows;
        c.seed = o.seed;
        table.push_back(c);
        if (d == kGoalHeadDim) {
            c.batch = kGoalBatchFactor * o.batch;
            c.heads = kGoalHeadsFactor * o.heads;
            table.push_back(c);
        }
    }
    double goal_rmse = -1, goal_ratio = -1, goal_floor = -1, goal_floor_ratio = -1;
    std::string error;
    if (!table.empty()) {
        std::printf("seqlen 4096:\n");
        print_header();
    }
    for (const testing::Fp8AccuracyConfig& c : table) {
        testing::Fp8AccuracyResult r;
        if (!testing::measure_fp8_accuracy(c, &r, &error)) {
            std::fprintf(stderr, "hattn: accuracy-fp8 (seqlen %d, d %d): %s\n", c.seqlen, c.head_dim, error.c_str());
            return kExitCuda;
        }
        print_row(c, r);
        if (c.head_dim == kGoalHeadDim) {  // the last d128 row: the larger sample
            goal_rmse = r.rmse_block_hadamard;
            goal_ratio = r.rmse_per_tensor / r.rmse_block_hadamard;
            goal_floor = r.floor_block_hadamard;
            goal_floor_ratio = r.floor_per_tensor / r.floor_block_hadamard;
        }
    }
    if (!o.seqlens.empty()) {
        std::printf("\nagainst the sequence length (d %d, batch 1, heads %d):\n", kGoalHeadDim, o.heads);
        print_header();
    }
    for (int s : o.seqlens) {
        testing::Fp8AccuracyConfig c;
        c.batch = 1;
        c.heads = o.heads;
        c.seqlen = s;
        c.head_dim = kGoalHeadDim;
        c.rows_per_head = o.long_rows;
        c.seed = o.seed;
        testing::Fp8AccuracyResult r;
        if (!testing::measure_fp8_accuracy(c, &r, &error)) {
            std::fprintf(stderr, "hattn: accuracy-fp8 (seqlen %d, d %d): %s\n", c.seqlen, c.head_dim, error.c_str());
            return kExitCuda;
        }
        print_row(c, r);
    }
    if (goal_rmse >= 0) {
        const bool met = goal_rmse <= kGoalRmse && goal_ratio >= kGoalRatio;
        std::printf("\ngoal at seqlen 4096, d 128: (c) %.3e (<= %.0e: %s), (a)/(c) %.2f (>= %.1f: %s) -> %s\n", goal_rmse,
                    kGoalRmse, goal_rmse <= kGoalRmse ? "yes" : "no", goal_ratio, kGoalRatio,
                    goal_ratio >= kGoalRatio ? "yes" : "no", met ? "MET" : "NOT MET");
        std::printf("  (%d x batch, %d x heads; the inputs' own floors there: (c) %.3e, so the kernel adds %.1f%%; "
                    "(a)/(c) %.2f)\n",
                    kGoalBatchFactor, kGoalHeadsFactor, goal_floor, 100.0 * (goal_rmse / goal_floor - 1.0),
                    goal_floor_ratio);
    }
    return kExitPass;
}

}  // namespace hattn::cli
