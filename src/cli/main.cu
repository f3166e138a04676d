// hattn/src/cli/main.cu -- the `hattn` command line tool: run the forward kernel on fresh random
// inputs, check it against the plain GPU reference, and time it.
//
//   hattn                       the default shape (batch 2, heads 16, seqlen 4096, dim 128, bf16)
//   hattn fwd [options]         see --help
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
#include <string>
#include <vector>

#include "host/device_info.h"
#include "testing/device_random.cuh"
#include "testing/numerics.h"
#include "testing/gpu_reference.h"
#include "hattn.h"

namespace {

constexpr int kExitPass = 0;
constexpr int kExitVerifyFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitCuda = 3;

// Dense bf16/fp16 tensor-core peak of an H100/H200 SXM: 4096 FLOP/clk/SM x 132 SMs x 1.83 GHz.
constexpr double kDenseBf16PeakTflops = 989.0;

// Timing: the median of `iters` runs after `warmup` untimed ones; before each timed run the L2
// is flushed by writing a buffer of kL2FlushFactor x its size, so no run starts with warm inputs.
constexpr int kDefaultIters = 20;
constexpr int kDefaultWarmup = 3;
constexpr int kL2FlushFactor = 2;

struct Options {
    int batch = 2;
    int heads = 16;
    int heads_kv = -1;  // default: heads (MHA)
    int seqlen_q = 4096;
    int seqlen_k = -1;  // default: seqlen_q
    int dim = 128;
    hattn_dtype dtype = HATTN_DTYPE_BF16;
    bool causal = false;
    bool verify = true;
    bool with_lse = true;
    float scale = 0.f;
    unsigned flags = 0;
    int iters = kDefaultIters;
    int warmup = kDefaultWarmup;
    uint64_t seed = 0x5EEDull;
};

void print_help(FILE* out) {
    std::fprintf(out,
                 "usage: hattn [fwd] [options]\n"
                 "\n"
                 "Runs hattn_fwd on random N(0,1) inputs, checks O and LSE against a plain GPU reference,\n"
                 "then times it (median of --iters runs, L2 flushed before each).\n"
                 "With no arguments: --batch 2 --heads 16 --seqlen 4096 --dim 128 --dtype bf16 (no mask).\n"
                 "\n"
                 "options:\n"
                 "  --batch N              batch size (2)\n"
                 "  --heads N              query heads (16)\n"
                 "  --heads-kv N           key/value heads, divides --heads (= --heads; 1 = MQA)\n"
                 "  --seqlen N             sets both --seqlen-q and --seqlen-k (4096)\n"
                 "  --seqlen-q N           query length\n"
                 "  --seqlen-k N           key/value length (= --seqlen-q)\n"
                 "  --dim N, --head-dim N  head dim: 64, 128 or 256 (128)\n"
                 "  --dtype bf16|fp16      element type (bf16)\n"
                 "  --causal               bottom-right causal mask\n"
                 "  --scale X              softmax scale (default 1/sqrt(dim))\n"
                 "  --no-lse               do not request LSE\n"
                 "  --no-pingpong          ablation: HATTN_FWD_NO_PINGPONG (dim 128, bf16)\n"
                 "  --no-intra-wg-overlap  ablation: HATTN_FWD_NO_INTRA_WG_OVERLAP (dim 128, bf16)\n"
                 "  --iters N              timed runs, 0 to skip timing (%d)\n"
                 "  --warmup N             untimed runs before timing (%d)\n"
                 "  --no-verify            skip the reference check\n"
                 "  --seed N               random seed\n"
                 "  --help                 this text\n"
                 "\n"
                 "exit status: 0 pass, 1 verification failed, 2 bad arguments, 3 CUDA/device error\n",
                 kDefaultIters, kDefaultWarmup);
}

[[noreturn]] void usage_error(const std::string& what) {
    std::fprintf(stderr, "hattn: %s (see hattn --help)\n", what.c_str());
    std::exit(kExitUsage);
}

int parse_int(const std::string& flag, const char* text) {
    char* end = nullptr;
    errno = 0;
    const long value = std::strtol(text, &end, 10);
    if (end == text || *end != '\0' || errno != 0 || value < INT32_MIN || value > INT32_MAX) {
        usage_error(flag + " expects an integer, got '" + text + "'");
    }
    return static_cast<int>(value);
}

Options parse(int argc, char** argv) {
    Options o;
    int i = 1;
    if (i < argc && std::strcmp(argv[i], "fwd") == 0) ++i;
    for (; i < argc; ++i) {
        std::string arg = argv[i];
        std::string value;
        bool has_inline_value = false;
        const size_t eq = arg.find('=');
        if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
            value = arg.substr(eq + 1);
            arg = arg.substr(0, eq);
            has_inline_value = true;
        }
        auto next = [&]() -> std::string {
            if (has_inline_value) return value;
            if (i + 1 >= argc) usage_error(arg + " needs a value");
            return argv[++i];
        };
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
            if (t == "bf16") {
                o.dtype = HATTN_DTYPE_BF16;
            } else if (t == "fp16") {
                o.dtype = HATTN_DTYPE_FP16;
            } else {
                usage_error("--dtype expects bf16 or fp16, got '" + t + "'");
            }
        } else if (arg == "--causal") {
            o.causal = true;
        } else if (arg == "--scale") {
            const std::string t = next();
            char* end = nullptr;
            o.scale = std::strtof(t.c_str(), &end);
            if (end == t.c_str() || *end != '\0') usage_error("--scale expects a number, got '" + t + "'");
        } else if (arg == "--no-lse") {
            o.with_lse = false;
        } else if (arg == "--no-pingpong") {
            o.flags |= HATTN_FWD_NO_PINGPONG;
        } else if (arg == "--no-intra-wg-overlap") {
            o.flags |= HATTN_FWD_NO_INTRA_WG_OVERLAP;
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
        if (has_inline_value && (arg == "--causal" || arg == "--no-verify" || arg == "--no-lse" ||
                                 arg == "--no-pingpong" || arg == "--no-intra-wg-overlap")) {
            usage_error(arg + " takes no value");
        }
    }
    if (o.heads_kv < 0) o.heads_kv = o.heads;
    if (o.seqlen_k < 0) o.seqlen_k = o.seqlen_q;
    if (o.iters < 0 || o.warmup < 0) usage_error("--iters and --warmup must be >= 0");
    return o;
}

void check_cuda(cudaError_t rc, const char* what) {
    if (rc != cudaSuccess) {
        std::fprintf(stderr, "hattn: CUDA error in %s: %s (%s)\n", what, cudaGetErrorString(rc), cudaGetErrorName(rc));
        std::exit(kExitCuda);
    }
}

// A device allocation freed on scope exit.
class DeviceBuffer {
public:
    explicit DeviceBuffer(size_t bytes, const char* what) : bytes_(bytes) {
        if (bytes_ > 0) check_cuda(cudaMalloc(&ptr_, bytes_), what);
    }
    ~DeviceBuffer() {
        if (ptr_ != nullptr) cudaFree(ptr_);
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    void* get() const { return ptr_; }
    size_t bytes() const { return bytes_; }

private:
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

template <class T>
std::vector<T> to_host(const DeviceBuffer& d) {
    std::vector<T> h(d.bytes() / sizeof(T));
    check_cuda(cudaMemcpy(h.data(), d.get(), d.bytes(), cudaMemcpyDeviceToHost), "copy to host");
    return h;
}

// Forward FLOPs: two GEMMs (S = Q K^T and O = P V) of 2 * d FLOPs per visible (query, key) pair.
// Causal with sq == sk counts half of the full square (the convention of published numbers);
// with sq != sk the visible pairs are counted exactly.
double forward_flops(const Options& o) {
    double pairs;
    if (!o.causal) {
        pairs = static_cast<double>(o.seqlen_q) * o.seqlen_k;
    } else if (o.seqlen_q == o.seqlen_k) {
        pairs = 0.5 * static_cast<double>(o.seqlen_q) * o.seqlen_k;
    } else {
        pairs = 0;
        for (int i = 0; i < o.seqlen_q; ++i) pairs += hattn::numerics::visible_keys(i, o.seqlen_q, o.seqlen_k, true);
    }
    return 4.0 * o.batch * o.heads * o.dim * pairs;
}

// Checks O and LSE against the GPU reference; prints a report. Returns true on PASS.
bool verify(const Options& o, const hattn_fwd_params& params, const DeviceBuffer& v_dev, const DeviceBuffer& o_dev,
            const DeviceBuffer* lse_dev) {
    namespace nm = hattn::numerics;
    const size_t o_elems = o_dev.bytes() / sizeof(uint16_t);
    const size_t lse_elems = static_cast<size_t>(o.batch) * o.heads * o.seqlen_q;
    DeviceBuffer o_ref(o_elems * sizeof(float), "reference O");
    DeviceBuffer lse_ref(lse_elems * sizeof(float), "reference LSE");
    check_cuda(hattn::reference::reference_fwd(params, static_cast<float*>(o_ref.get()),
                                               static_cast<float*>(lse_ref.get()), nullptr),
               "reference kernel launch");
    check_cuda(cudaDeviceSynchronize(), "reference kernel");

    const std::vector<uint16_t> v_host = to_host<uint16_t>(v_dev);
    double max_abs_v = 0;
    for (uint16_t bits : v_host) max_abs_v = std::max(max_abs_v, std::fabs(static_cast<double>(nm::half_to_float(bits, o.dtype))));

    const std::vector<uint16_t> out = to_host<uint16_t>(o_dev);
    const std::vector<float> ref = to_host<float>(o_ref);
    const nm::Tolerance o_tol =
        nm::fwd_output_tolerance(o.dtype, max_abs_v, o.seqlen_k, hattn::reference::kGpuReferenceRelError);
    const nm::CompareResult o_cmp = nm::compare(
        out.size(), [&](size_t i) { return static_cast<double>(nm::half_to_float(out[i], o.dtype)); },
        [&](size_t i) { return static_cast<double>(ref[i]); }, o_tol);
    const int64_t o_dims[4] = {o.batch, o.seqlen_q, o.heads, o.dim};
    std::printf("verify O   [b, s, h, d]: max abs err %.3e, rel L2 %.3e (bounds: %.3e + %.3e*|ref| per element, rel L2 %.3e)\n",
                o_cmp.max_abs_err, o_cmp.rel_l2, o_tol.atol, o_tol.rtol, o_tol.max_rel_l2);
    if (!o_cmp.ok) {
        std::printf("  %s\n  worst element %s\n", o_cmp.summary().c_str(),
                    nm::describe_index(o_cmp.worst_index, o_dims).c_str());
    }
    bool ok = o_cmp.ok;

    if (lse_dev != nullptr) {
        const std::vector<float> lse = to_host<float>(*lse_dev);
        const std::vector<float> lse_r = to_host<float>(lse_ref);
        const nm::Tolerance l_tol = nm::fwd_lse_tolerance();
        const nm::CompareResult l_cmp = nm::compare(
            lse.size(), [&](size_t i) { return static_cast<double>(lse[i]); },
            [&](size_t i) { return static_cast<double>(lse_r[i]); }, l_tol);
        const int64_t lse_dims[4] = {1, o.batch, o.heads, o.seqlen_q};
        std::printf("verify LSE [b, h, s]:    max abs err %.3e, rel L2 %.3e (bounds: %.3e + %.3e*|ref|, rel L2 %.3e)\n",
                    l_cmp.max_abs_err, l_cmp.rel_l2, l_tol.atol, l_tol.rtol, l_tol.max_rel_l2);
        if (!l_cmp.ok) {
            std::printf("  %s\n  worst element %s\n", l_cmp.summary().c_str(),
                        nm::describe_index(l_cmp.worst_index, lse_dims).c_str());
        }
        ok = ok && l_cmp.ok;
    }
    std::printf("verify: %s\n", ok ? "PASS" : "FAIL");
    return ok;
}

// Median time of hattn_fwd in ms, each run timed alone with events after an L2 flush.
double time_forward(const Options& o, const hattn_fwd_params& params) {
    int l2_bytes = 0;
    int device = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    check_cuda(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device), "L2 size query");
    DeviceBuffer flush(static_cast<size_t>(l2_bytes) * kL2FlushFactor, "L2 flush buffer");
    cudaStream_t stream;
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    cudaEvent_t start, stop;
    check_cuda(cudaEventCreate(&start), "cudaEventCreate");
    check_cuda(cudaEventCreate(&stop), "cudaEventCreate");

    for (int w = 0; w < o.warmup; ++w) {
        const hattn_status st = hattn_fwd(&params, stream);
        if (st != HATTN_SUCCESS) {
            std::fprintf(stderr, "hattn: hattn_fwd failed during warm-up: %s\n", hattn_status_string(st));
            std::exit(kExitCuda);
        }
    }
    std::vector<float> times_ms;
    for (int it = 0; it < o.iters; ++it) {
        check_cuda(cudaMemsetAsync(flush.get(), it & 0xFF, flush.bytes(), stream), "L2 flush");
        check_cuda(cudaEventRecord(start, stream), "cudaEventRecord");
        const hattn_status st = hattn_fwd(&params, stream);
        check_cuda(cudaEventRecord(stop, stream), "cudaEventRecord");
        if (st != HATTN_SUCCESS) {
            std::fprintf(stderr, "hattn: hattn_fwd failed while timing: %s\n", hattn_status_string(st));
            std::exit(kExitCuda);
        }
        check_cuda(cudaEventSynchronize(stop), "timed run");
        float ms = 0;
        check_cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
        times_ms.push_back(ms);
    }
    check_cuda(cudaGetLastError(), "timed runs");
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaStreamDestroy(stream);
    std::sort(times_ms.begin(), times_ms.end());
    const size_t n = times_ms.size();
    return n % 2 == 1 ? times_ms[n / 2] : 0.5 * (times_ms[n / 2 - 1] + times_ms[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);

    // Validate the shape before touching the GPU, with placeholder pointers (validation never
    // dereferences them): a bad shape is reported by hattn itself, as a library user sees it.
    constexpr uintptr_t kPlaceholderAddress = 256;
    const void* placeholder = reinterpret_cast<const void*>(kPlaceholderAddress);
    hattn_fwd_params params = hattn_fwd_params_contiguous(placeholder, placeholder, placeholder,
                                                          const_cast<void*>(placeholder), o.batch, o.heads, o.heads_kv,
                                                          o.seqlen_q, o.seqlen_k, o.dim, o.dtype);
    params.causal = o.causal ? 1 : 0;
    params.softmax_scale = o.scale;
    params.flags = o.flags;
    char msg[512];
    const hattn_status valid = hattn_fwd_validate(&params, msg, sizeof(msg));
    if (valid != HATTN_SUCCESS) {
        std::fprintf(stderr, "hattn: invalid parameters: %s: %s\n", hattn_status_string(valid), msg);
        return kExitUsage;
    }

    // The device must be usable before anything is allocated or filled: no driver, no GPU or a
    // non-Hopper GPU stops here with what is needed.
    const std::string no_gpu = hattn::host::gpu_unavailable_reason();
    if (!no_gpu.empty()) {
        std::fprintf(stderr, "hattn: no usable NVIDIA GPU: %s. %s.\n", no_gpu.c_str(),
                     hattn::host::hopper_requirements().c_str());
        return kExitCuda;
    }
    const std::string not_hopper = hattn::host::hopper_unavailable_reason();
    if (!not_hopper.empty()) {
        std::fprintf(stderr, "hattn: %s\n", not_hopper.c_str());
        return kExitCuda;
    }
    int device = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    cudaDeviceProp prop;
    check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");

    const char* dtype_name = o.dtype == HATTN_DTYPE_BF16 ? "bf16" : "fp16";
    std::printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
    std::printf("fwd: batch %d, heads %d (kv %d), seqlen_q %d, seqlen_k %d, dim %d, %s, %s%s%s, seed %llu\n", o.batch,
                o.heads, o.heads_kv, o.seqlen_q, o.seqlen_k, o.dim, dtype_name, o.causal ? "causal" : "full",
                (o.flags & HATTN_FWD_NO_PINGPONG) ? ", no ping-pong" : "",
                (o.flags & HATTN_FWD_NO_INTRA_WG_OVERLAP) ? ", no intra-warpgroup overlap" : "",
                static_cast<unsigned long long>(o.seed));

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

    const hattn_status st = hattn_fwd(&params, nullptr);
    if (st != HATTN_SUCCESS) {
        const hattn_status again = hattn_fwd_validate(&params, msg, sizeof(msg));
        std::fprintf(stderr, "hattn: hattn_fwd failed: %s%s%s (last CUDA error: %s)\n", hattn_status_string(st),
                     again != HATTN_SUCCESS ? ": " : "", again != HATTN_SUCCESS ? msg : "",
                     cudaGetErrorString(cudaGetLastError()));
        return st == HATTN_ERROR_CUDA || st == HATTN_ERROR_UNSUPPORTED_DEVICE ? kExitCuda : kExitUsage;
    }
    check_cuda(cudaDeviceSynchronize(), "hattn_fwd");
    check_cuda(cudaGetLastError(), "hattn_fwd");

    bool ok = true;
    if (o.verify) ok = verify(o, params, v, out, o.with_lse ? &lse : nullptr);

    if (o.iters > 0) {
        const double ms = time_forward(o, params);
        const double tflops = forward_flops(o) / (ms * 1e-3) / 1e12;
        std::printf("time: %.4f ms (median of %d, L2 flushed), %.1f TFLOPS, %.1f%% of the %.0f TFLOPS dense %s peak\n",
                    ms, o.iters, tflops, 100.0 * tflops / kDenseBf16PeakTflops, kDenseBf16PeakTflops, dtype_name);
    }
    return ok ? kExitPass : kExitVerifyFailed;
}
