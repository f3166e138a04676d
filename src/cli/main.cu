// hattn/src/cli/main.cu -- the `hattn` command line tool: run the forward or backward kernel on fresh
// random inputs, check it against the plain GPU reference, and time it.
//
//   hattn                       the default shape (batch 2, heads 16, seqlen 4096, dim 128, bf16)
//   hattn fwd [options]         see --help
//   hattn bwd [options]         the backward: hattn_fwd for O and LSE, then hattn_bwd on random dO
//   hattn fwd --dtype e4m3 ...  bf16 inputs -> hattn_fp8_prepass -> hattn_fwd_fp8 (fwd_fp8.cu)
//   hattn accuracy-fp8 ...      the FP8 accuracy table on inputs with outliers (accuracy_fp8.cu)
//
// Exit status: 0 pass, 1 verification failed, 2 bad command line or rejected parameters,
// 3 CUDA or device error.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/format.h"
#include "host/device_info.h"
#include "testing/device_random.cuh"
#include "testing/numerics.h"
#include "testing/gpu_reference.h"
#include "hattn.h"
#include "cli/cli_common.h"

namespace {

using namespace hattn::cli;

void print_help(FILE* out) {
    std::fprintf(out,
                 "usage: hattn [fwd|bwd] [options]\n"
                 "       hattn accuracy-fp8 [options]\n"
                 "\n"
                 "fwd (the default): runs hattn_fwd on random N(0,1) inputs, checks O and LSE against a plain GPU\n"
                 "reference, then times it (median of --iters runs, L2 flushed before each).\n"
                 "bwd: runs hattn_fwd for O and LSE, then hattn_bwd on random N(0,1) dO; checks dQ, dK and dV against\n"
                 "a plain GPU reference, then times hattn_bwd the same way.\n"
                 "With no arguments: fwd --batch 2 --heads 16 --seqlen 4096 --dim 128 --dtype bf16 (no mask).\n"
                 "fwd --dtype e4m3: bf16 N(0,1) inputs -> hattn_fp8_prepass [--rope] [--hadamard] -> hattn_fwd_fp8;\n"
                 "checks O and LSE against the plain GPU reference of the unquantized (RoPE'd) bf16 inputs with\n"
                 "e4m3 bounds, times the FP8 kernel (TFLOPS) and the pre-pass (GB/s) separately.\n"
                 "accuracy-fp8: the FP8 accuracy table (hattn accuracy-fp8 --help).\n"
                 "\n"
                 "options:\n"
                 "  --batch N              batch size (2)\n"
                 "  --heads N              query heads (16)\n"
                 "  --heads-kv N           key/value heads, divides --heads (= --heads; 1 = MQA)\n"
                 "  --seqlen N             sets both --seqlen-q and --seqlen-k (4096)\n"
                 "  --seqlen-q N           query length\n"
                 "  --seqlen-k N           key/value length (= --seqlen-q)\n"
                 "  --dim N, --head-dim N  head dim: 64, 128 or 256 (128)\n"
                 "  --dtype bf16|fp16|e4m3 element type (bf16); e4m3: fwd only, from bf16 inputs through\n"
                 "                         hattn_fp8_prepass and hattn_fwd_fp8 (see below)\n"
                 "  --hadamard             e4m3: the pre-pass's random-sign Hadamard on Q and K\n"
                 "  --rope interleaved|half  e4m3: the pre-pass's RoPE on Q and K (GPT-J / GPT-NeoX pairs)\n"
                 "  --v-layout transposed|rows  e4m3: the pre-pass writes V^T for the FP8 forward (transposed,\n"
                 "                         the default) or V's rows, which hattn_fwd_fp8 transposes first\n"
                 "  --v-per-head           e4m3: the pre-pass gives V one descale per (batch, KV head)\n"
                 "                         (HATTN_FP8_PREPASS_V_PER_HEAD)\n"
                 "  --causal               bottom-right causal mask\n"
                 "  --scale X              softmax scale (default 1/sqrt(dim))\n"
                 "  --no-lse               fwd: do not request LSE\n"
                 "  --no-workspace         fwd (any dtype): no scheduler workspace (causal tiles and d64's partial\n"
                 "                         ones keep a fixed order; full masks do not split their last pass)\n"
                 "  --no-pingpong          ablation: HATTN_FWD_NO_PINGPONG (dim 128, bf16; bwd: its forward run)\n"
                 "  --no-intra-wg-overlap  ablation: HATTN_FWD_NO_INTRA_WG_OVERLAP (dim 128, bf16; bwd: its forward run)\n"
                 "  --deterministic        bwd: HATTN_BWD_DETERMINISTIC (bit-identical dQ from run to run)\n"
                 "  --iters N              timed runs, 0 to skip timing (%d)\n"
                 "  --warmup N             untimed runs before timing (%d)\n"
                 "  --no-verify            skip the reference check\n"
                 "  --seed N               random seed\n"
                 "  --help                 this text\n"
                 "\n"
                 "exit status: 0 pass, 1 verification failed, 2 bad arguments, 3 CUDA/device error\n",
                 kDefaultIters, kDefaultWarmup);
}


Options parse(int argc, char** argv) {
    Options o;
    bool hadamard_given = false;
    bool v_layout_given = false;
    int i = 1;
    if (i < argc && std::strcmp(argv[i], "fwd") == 0) {
        ++i;
    } else if (i < argc && std::strcmp(argv[i], "bwd") == 0) {
        o.pass = Pass::kBackward;
        ++i;
    }
    for (; i < argc; ++i) {
        FlagArg flag_arg(argc, argv, i, "");
        const std::string& arg = flag_arg.flag;
        auto next = [&] { return flag_arg.next(); };
        auto next_int = [&]() { return parse_int(arg, next().c_str()); };
        if (arg == "--help" || arg == "-h") {
            print_help(stdout);
            std::exit(kExitPass);
        } else if (arg == "--batch") {
            o.batch = next_int();
        } else if (arg == "--heads") {
            o.heads = next_int();
        } else if (arg == "--heads-kv") {
            o.heads_kv = next_int();
        } else if (arg == "--seqlen") {
            o.seqlen_q = o.seqlen_k = next_int();
        } else if (arg == "--seqlen-q") {
            o.seqlen_q = next_int();
        } else if (arg == "--seqlen-k") {
            o.seqlen_k = next_int();
        } else if (arg == "--dim" || arg == "--head-dim") {
            o.dim = next_int();
        } else if (arg == "--dtype") {
            const std::string t = next();
            o.e4m3 = false;
            if (t == "bf16") {
                o.dtype = HATTN_DTYPE_BF16;
            } else if (t == "fp16") {
                o.dtype = HATTN_DTYPE_FP16;
            } else if (t == "e4m3") {
                o.dtype = HATTN_DTYPE_BF16;  // the pre-pass's inputs
                o.e4m3 = true;
            } else {
                usage_error("--dtype expects bf16, fp16 or e4m3, got '" + t + "'");
            }
        } else if (arg == "--hadamard") {
            o.hadamard = true;
            hadamard_given = true;
        } else if (arg == "--rope") {
            const std::string t = next();
            if (t == "interleaved") {
                o.rope = HATTN_ROPE_INTERLEAVED;
            } else if (t == "half") {
                o.rope = HATTN_ROPE_HALF;
            } else {
                usage_error("--rope expects interleaved or half, got '" + t + "'");
            }
        } else if (arg == "--v-layout") {
            const std::string t = next();
            if (t == "transposed") {
                o.v_transposed = true;
            } else if (t == "rows") {
                o.v_transposed = false;
            } else {
                usage_error("--v-layout expects transposed or rows, got '" + t + "'");
            }
            v_layout_given = true;
        } else if (arg == "--v-per-head") {
            o.v_per_head = true;
        } else if (arg == "--causal") {
            o.causal = true;
        } else if (arg == "--scale") {
            const std::string t = next();
            char* end = nullptr;
            o.scale = std::strtof(t.c_str(), &end);
            if (end == t.c_str() || *end != '\0') usage_error("--scale expects a number, got '" + t + "'");
        } else if (arg == "--no-lse") {
            o.with_lse = false;
        } else if (arg == "--no-workspace") {
            o.with_workspace = false;
        } else if (arg == "--no-pingpong") {
            o.flags |= HATTN_FWD_NO_PINGPONG;
        } else if (arg == "--no-intra-wg-overlap") {
            o.flags |= HATTN_FWD_NO_INTRA_WG_OVERLAP;
        } else if (arg == "--deterministic") {
            o.deterministic = true;
        } else if (arg == "--iters") {
            o.iters = next_int();
        } else if (arg == "--warmup") {
            o.warmup = next_int();
        } else if (arg == "--no-verify") {
            o.verify = false;
        } else if (arg == "--seed") {
            o.seed = static_cast<uint64_t>(std::strtoull(next().c_str(), nullptr, 0));
        } else {
            usage_error("unknown argument '" + arg + "'");
        }
        if (flag_arg.has_inline_value() && (arg == "--causal" || arg == "--no-verify" || arg == "--no-lse" || arg == "--no-workspace" ||
                                 arg == "--no-pingpong" || arg == "--no-intra-wg-overlap" || arg == "--deterministic" ||
                                 arg == "--hadamard")) {
            usage_error(arg + " takes no value");
        }
    }
    if (o.e4m3 && o.pass == Pass::kBackward) usage_error("--dtype e4m3 is a forward option (there is no FP8 backward)");
    if (!o.e4m3 && hadamard_given) usage_error("--hadamard needs --dtype e4m3 (it is a step of the FP8 pre-pass)");
    if (!o.e4m3 && o.rope != HATTN_ROPE_NONE) usage_error("--rope needs --dtype e4m3 (it is a step of the FP8 pre-pass)");
    if (!o.e4m3 && v_layout_given) usage_error("--v-layout needs --dtype e4m3 (the FP8 pre-pass's V output)");
    if (!o.e4m3 && o.v_per_head) usage_error("--v-per-head needs --dtype e4m3 (the FP8 pre-pass's V descales)");
    if (o.e4m3 && o.flags != 0) {
        usage_error("--no-pingpong and --no-intra-wg-overlap are ablations of the bf16 forward, not of --dtype e4m3");
    }
    if (o.pass == Pass::kBackward && !o.with_lse) usage_error("--no-lse is a forward option: the backward needs LSE");
    if (o.pass == Pass::kForward && o.deterministic) usage_error("--deterministic is a backward option (hattn bwd)");
    if (o.heads_kv < 0) o.heads_kv = o.heads;
    if (o.seqlen_k < 0) o.seqlen_k = o.seqlen_q;
    if (o.iters < 0 || o.warmup < 0) usage_error("--iters and --warmup must be >= 0");
    return o;
}

// Checks O and LSE against the GPU reference; prints a report. Returns true on PASS.
bool verify_forward(const Options& o, const hattn_fwd_params& params, const DeviceBuffer& v_dev,
                    const DeviceBuffer& o_dev, const DeviceBuffer* lse_dev) {
    namespace nm = hattn::numerics;
    const size_t o_elems = o_dev.bytes() / sizeof(uint16_t);
    const size_t lse_elems = static_cast<size_t>(o.batch) * o.heads * o.seqlen_q;
    DeviceBuffer o_ref(o_elems * sizeof(float), "reference O");
    DeviceBuffer lse_ref(lse_elems * sizeof(float), "reference LSE");
    check_cuda(hattn::reference::reference_fwd(params, static_cast<float*>(o_ref.get()),
                                               static_cast<float*>(lse_ref.get()), nullptr),
               "reference kernel launch");
    check_cuda(cudaDeviceSynchronize(), "reference kernel");

    const double max_abs_v = max_abs_16(to_host<uint16_t>(v_dev), o.dtype);
    const std::vector<uint16_t> out = to_host<uint16_t>(o_dev);
    const std::vector<float> ref = to_host<float>(o_ref);
    const nm::Tolerance o_tol =
        nm::fwd_output_tolerance(o.dtype, max_abs_v, o.seqlen_k, hattn::reference::kGpuReferenceRelError);
    const nm::CompareResult o_cmp = nm::compare(
        out.size(), [&](size_t i) { return static_cast<double>(nm::half_to_float(out[i], o.dtype)); },
        [&](size_t i) { return static_cast<double>(ref[i]); }, o_tol);
    const int64_t o_dims[4] = {o.batch, o.seqlen_q, o.heads, o.dim};
    bool ok = report("O", "[b, s, h, d]:", o_cmp,
                     hattn::common::format("%.3e + %.3e*|ref| per element, rel L2 %.3e", o_tol.atol, o_tol.rtol,
                                           o_tol.max_rel_l2),
                     o_dims);

    if (lse_dev != nullptr) {
        const std::vector<float> lse = to_host<float>(*lse_dev);
        const std::vector<float> lse_r = to_host<float>(lse_ref);
        const nm::Tolerance l_tol = nm::fwd_lse_tolerance();
        const nm::CompareResult l_cmp = nm::compare(
            lse.size(), [&](size_t i) { return static_cast<double>(lse[i]); },
            [&](size_t i) { return static_cast<double>(lse_r[i]); }, l_tol);
        const int64_t lse_dims[4] = {1, o.batch, o.heads, o.seqlen_q};
        ok = report("LSE", "[b, h, s]:", l_cmp,
                    hattn::common::format("%.3e + %.3e*|ref|, rel L2 %.3e", l_tol.atol, l_tol.rtol, l_tol.max_rel_l2),
                    lse_dims) &&
             ok;
    }
    std::printf("verify: %s\n", ok ? "PASS" : "FAIL");
    return ok;
}

// The backward's device tensors (contiguous [b, s, h, d]).
struct BackwardBuffers {
    const DeviceBuffer *q, *k, *dout, *dq, *dk, *dv;
};

// Checks dQ, dK and dV against the GPU reference (which reads the O and LSE hattn_fwd wrote, as
// hattn_bwd does), with the per-element bounds of numerics::bwd_gradient_tolerance. Returns true
// on PASS.
bool verify_backward(const Options& o, const hattn_bwd_params& params, const BackwardBuffers& b) {
    namespace nm = hattn::numerics;
    const size_t q_elems = b.dq->bytes() / sizeof(uint16_t), kv_elems = b.dk->bytes() / sizeof(uint16_t);
    hattn::reference::BwdReferenceOutputs out;
    std::vector<std::unique_ptr<DeviceBuffer>> mem;
    float** slots[8] = {&out.dq, &out.dk, &out.dv, &out.dq_weight, &out.dk_weight, &out.dv_weight, &out.dq_cancel,
                        &out.dk_cancel};
    const bool is_q[8] = {true, false, false, true, false, false, true, false};
    for (int i = 0; i < 8; ++i) {
        mem.push_back(std::make_unique<DeviceBuffer>((is_q[i] ? q_elems : kv_elems) * sizeof(float), "reference"));
        *slots[i] = static_cast<float*>(mem.back()->get());
    }
    check_cuda(hattn::reference::reference_bwd(params, out, nullptr), "reference kernel launch");
    check_cuda(cudaDeviceSynchronize(), "reference kernels");
    auto host = [&](int i) { return to_host<float>(*mem[i]); };

    const double scale = params.softmax_scale != 0.f ? params.softmax_scale : 1.0 / std::sqrt(static_cast<double>(o.dim));
    const int group = o.heads / o.heads_kv;
    struct Gradient {
        const char* name;
        const DeviceBuffer* got;
        int ref, weight, cancel;  // indices into mem (cancel < 0: none)
        double max_operand;       // max|B| (numerics::bwd_gradient_tolerance)
        bool kv;
    } grads[] = {
        {"dQ", b.dq, 0, 3, 6, scale * max_abs_16(to_host<uint16_t>(*b.k), o.dtype), false},
        {"dK", b.dk, 1, 4, 7, scale * max_abs_16(to_host<uint16_t>(*b.q), o.dtype), true},
        {"dV", b.dv, 2, 5, -1, max_abs_16(to_host<uint16_t>(*b.dout), o.dtype), true},
    };
    bool ok = true;
    for (const Gradient& g : grads) {
        const std::vector<uint16_t> got = to_host<uint16_t>(*g.got);
        const std::vector<float> ref = host(g.ref), weight = host(g.weight);
        const std::vector<float> cancel = g.cancel >= 0 ? host(g.cancel) : std::vector<float>(ref.size(), 0.f);
        const int seqlen = g.kv ? o.seqlen_k : o.seqlen_q;
        const int heads = g.kv ? o.heads_kv : o.heads;
        std::vector<double> terms(static_cast<size_t>(seqlen));
        for (int s = 0; s < seqlen; ++s) {
            terms[s] = g.kv ? static_cast<double>(group) * nm::rows_seeing_key(s, o.seqlen_q, o.seqlen_k, o.causal)
                            : nm::visible_keys(s, o.seqlen_q, o.seqlen_k, o.causal);
        }
        const size_t row_elems = static_cast<size_t>(heads) * o.dim;
        const nm::GradientTolerance tol =
            nm::bwd_gradient_tolerance(o.dtype, g.max_operand, hattn::reference::kGpuReferenceBwdRelError);
        const nm::CompareResult cmp = nm::compare_gradient(
            got.size(), [&](size_t i) { return static_cast<double>(nm::half_to_float(got[i], o.dtype)); },
            [&](size_t i) { return static_cast<double>(ref[i]); }, [&](size_t i) { return static_cast<double>(weight[i]); },
            [&](size_t i) { return static_cast<double>(cancel[i]); },
            [&](size_t i) { return terms[i / row_elems % terms.size()]; }, tol);
        const int64_t dims[4] = {o.batch, seqlen, heads, o.dim};
        ok = report(g.name, "[b, s, h, d]:", cmp,
                    hattn::common::format("%.3e * W + %.3e*|ref| per element, rel L2 %.3e", tol.weight_coef, tol.rtol,
                                          tol.max_rel_l2),
                    dims) &&
             ok;
    }
    std::printf("verify: %s\n", ok ? "PASS" : "FAIL");
    return ok;
}

// Median time of `launch()` in ms, each run timed alone with events after an L2 flush. `launch`
// returns the hattn status of one call on the given stream.
// A failed call's status (and, where validation explains it, the message); the exit code.

}  // namespace

int main(int argc, char** argv) {
    if (argc > 1 && std::strcmp(argv[1], "accuracy-fp8") == 0) return run_accuracy_fp8(argc, argv, 2);
    const Options o = parse(argc, argv);
    if (o.e4m3) return run_fwd_fp8(o);
    const bool backward = o.pass == Pass::kBackward;

    // Validate the shape before touching the GPU, with placeholder pointers (validation never
    // dereferences them): a bad shape is reported by hattn itself, as a library user sees it.
    constexpr uintptr_t kPlaceholderAddress = 256;
    void* placeholder = reinterpret_cast<void*>(kPlaceholderAddress);
    const float* placeholder_lse = static_cast<const float*>(placeholder);
    hattn_fwd_params params = hattn_fwd_params_contiguous(placeholder, placeholder, placeholder, placeholder, o.batch,
                                                          o.heads, o.heads_kv, o.seqlen_q, o.seqlen_k, o.dim, o.dtype);
    params.causal = o.causal ? 1 : 0;
    params.softmax_scale = o.scale;
    params.flags = o.flags;
    require_valid(validate_fwd, &params);
    const size_t workspace_bytes = hattn_bwd_workspace_size(o.batch, o.heads, o.seqlen_q, o.dim);
    hattn_bwd_params bwd = hattn_bwd_params_contiguous(placeholder, placeholder, placeholder, placeholder, placeholder,
                                                       placeholder_lse, placeholder, placeholder, placeholder, o.batch,
                                                       o.heads, o.heads_kv, o.seqlen_q, o.seqlen_k, o.dim, o.dtype);
    bwd.causal = params.causal;
    bwd.softmax_scale = o.scale;
    bwd.flags = o.deterministic ? unsigned{HATTN_BWD_DETERMINISTIC} : 0u;
    bwd.workspace = placeholder;
    bwd.workspace_size = workspace_bytes;
    if (backward) require_valid(validate_bwd, &bwd);

    require_hopper();
    const char* dtype_name = o.dtype == HATTN_DTYPE_BF16 ? "bf16" : "fp16";
    std::printf("%s: batch %d, heads %d (kv %d), seqlen_q %d, seqlen_k %d, dim %d, %s, %s%s%s%s, seed %llu\n",
                backward ? "bwd" : "fwd", o.batch, o.heads, o.heads_kv, o.seqlen_q, o.seqlen_k, o.dim, dtype_name,
                o.causal ? "causal" : "full", (o.flags & HATTN_FWD_NO_PINGPONG) ? ", no ping-pong" : "",
                (o.flags & HATTN_FWD_NO_INTRA_WG_OVERLAP) ? ", no intra-warpgroup overlap" : "",
                o.deterministic ? ", deterministic" : "", static_cast<unsigned long long>(o.seed));

    const size_t q_elems = static_cast<size_t>(o.batch) * o.seqlen_q * o.heads * o.dim;
    const size_t kv_elems = static_cast<size_t>(o.batch) * o.seqlen_k * o.heads_kv * o.dim;
    const size_t lse_elems = static_cast<size_t>(o.batch) * o.heads * o.seqlen_q;
    DeviceBuffer q(q_elems * 2, "alloc q"), k(kv_elems * 2, "alloc k"), v(kv_elems * 2, "alloc v");
    DeviceBuffer out(q_elems * 2, "alloc o");
    DeviceBuffer lse(o.with_lse ? lse_elems * sizeof(float) : 0, "alloc lse");

    // Fresh inputs (a different stream of the seed per tensor); outputs poisoned with NaN so an
    // element the kernel does not write fails verification.
    constexpr float kInputStddev = 1.0f;
    check_cuda(hattn::testing::fill_normal(q.get(), q_elems, o.dtype, o.seed * 3 + 0, kInputStddev, nullptr), "fill q");
    check_cuda(hattn::testing::fill_normal(k.get(), kv_elems, o.dtype, o.seed * 3 + 1, kInputStddev, nullptr), "fill k");
    check_cuda(hattn::testing::fill_normal(v.get(), kv_elems, o.dtype, o.seed * 3 + 2, kInputStddev, nullptr), "fill v");
    constexpr int kPoisonByte = 0xFF;  // 0xFFFF is NaN in bf16 and fp16, 0xFFFFFFFF in fp32
    check_cuda(cudaMemset(out.get(), kPoisonByte, out.bytes()), "poison o");
    if (o.with_lse) check_cuda(cudaMemset(lse.get(), kPoisonByte, lse.bytes()), "poison lse");
    check_cuda(cudaDeviceSynchronize(), "input fill");

    params.q = q.get();
    params.k = k.get();
    params.v = v.get();
    params.o = out.get();
    params.lse = o.with_lse ? static_cast<float*>(lse.get()) : nullptr;
    // Causal problems then take their tiles from the workspace's counter, the fastest schedule.
    const ScheduleWorkspace schedule(o.with_workspace);
    params.workspace = schedule.get();
    params.workspace_size = schedule.bytes();

    const hattn_status st = hattn_fwd(&params, nullptr);
    if (st != HATTN_SUCCESS) return call_failed("hattn_fwd", st, validate_fwd, &params);
    check_cuda(cudaDeviceSynchronize(), "hattn_fwd");
    check_cuda(cudaGetLastError(), "hattn_fwd");

    if (!backward) {
        bool ok = true;
        if (o.verify) ok = verify_forward(o, params, v, out, o.with_lse ? &lse : nullptr);
        if (o.iters > 0) {
            print_timing(o, time_median(o, "hattn_fwd", [&](cudaStream_t s) { return hattn_fwd(&params, s); }),
                         forward_flops(o));
        }
        return ok ? kExitPass : kExitVerifyFailed;
    }

    // The backward on fresh dO (its own stream of the seed), its outputs poisoned and its workspace
    // filled with garbage (hattn_bwd initializes what it needs).
    DeviceBuffer dout(q_elems * 2, "alloc dout"), dq(q_elems * 2, "alloc dq"), dk(kv_elems * 2, "alloc dk"),
        dv(kv_elems * 2, "alloc dv");
    DeviceBuffer workspace(workspace_bytes, "alloc workspace");  // cudaMalloc: 256-byte aligned
    const uint64_t dout_seed = hattn::testing::detail::splitmix64(o.seed);
    check_cuda(hattn::testing::fill_normal(dout.get(), q_elems, o.dtype, dout_seed, kInputStddev, nullptr), "fill dout");
    for (const DeviceBuffer* b : {&dq, &dk, &dv, &workspace}) check_cuda(cudaMemset(b->get(), kPoisonByte, b->bytes()), "poison");
    check_cuda(cudaDeviceSynchronize(), "dout fill");
    bwd.q = q.get();
    bwd.k = k.get();
    bwd.v = v.get();
    bwd.o = out.get();
    bwd.dout = dout.get();
    bwd.lse = static_cast<const float*>(lse.get());
    bwd.dq = dq.get();
    bwd.dk = dk.get();
    bwd.dv = dv.get();
    bwd.workspace = workspace.get();

    const hattn_status bst = hattn_bwd(&bwd, nullptr);
    if (bst != HATTN_SUCCESS) return call_failed("hattn_bwd", bst, validate_bwd, &bwd);
    check_cuda(cudaDeviceSynchronize(), "hattn_bwd");
    check_cuda(cudaGetLastError(), "hattn_bwd");

    bool ok = true;
    if (o.verify) ok = verify_backward(o, bwd, BackwardBuffers{&q, &k, &dout, &dq, &dk, &dv});
    if (o.iters > 0) {
        print_timing(o, time_median(o, "hattn_bwd", [&](cudaStream_t s) { return hattn_bwd(&bwd, s); }),
                     backward_flops(o));
    }
    return ok ? kExitPass : kExitVerifyFailed;
}
