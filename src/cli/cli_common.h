// hattn/src/cli/cli_common.h -- what the `hattn` subcommands share: exit codes, the parsed options,
// device buffers, timing, and the checks that run before the GPU is touched.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "host/device_info.h"
#include "testing/numerics.h"
#include "hattn.h"

namespace hattn::cli {

constexpr int kExitPass = 0;
constexpr int kExitVerifyFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitCuda = 3;

// Dense bf16/fp16 tensor-core peak of an H100/H200 SXM: 4096 FLOP/clk/SM x 132 SMs x 1.83 GHz.
constexpr double kDenseBf16PeakTflops = 989.0;
// Dense FP8 (e4m3) tensor-core peak of the same GPU: twice the bf16 rate.
constexpr double kDenseFp8PeakTflops = 1979.0;

// Timing: the median of `iters` runs after `warmup` untimed ones; before each timed run the L2
// is flushed by writing a buffer of kL2FlushFactor x its size, so no run starts with warm inputs.
constexpr int kDefaultIters = 20;
constexpr int kDefaultWarmup = 3;
constexpr int kL2FlushFactor = 2;

enum class Pass { kForward, kBackward };

struct Options {
    Pass pass = Pass::kForward;
    int batch = 2;
    int heads = 16;
    int heads_kv = -1;  // default: heads (MHA)
    int seqlen_q = 4096;
    int seqlen_k = -1;  // default: seqlen_q
    int dim = 128;
    hattn_dtype dtype = HATTN_DTYPE_BF16;  // of the inputs (bf16 with --dtype e4m3)
    bool e4m3 = false;                     // --dtype e4m3: hattn_fp8_prepass + hattn_fwd_fp8
    bool hadamard = false;                 // e4m3: the pre-pass's random-sign Hadamard
    hattn_rope rope = HATTN_ROPE_NONE;     // e4m3: the pre-pass's RoPE
    bool v_transposed = true;              // e4m3: the pre-pass writes V^T (no transpose pass)
    bool v_per_head = false;               // e4m3: one V descale per (batch, KV head) from the pre-pass
    bool causal = false;
    bool verify = true;
    bool with_lse = true;
    bool with_workspace = true;  // fwd: pass the forward's workspace (the dynamic causal walk)
    float scale = 0.f;
    unsigned flags = 0;      // HATTN_FWD_*
    bool deterministic = false;  // HATTN_BWD_DETERMINISTIC
    int iters = kDefaultIters;
    int warmup = kDefaultWarmup;
    uint64_t seed = 0x5EEDull;
};

[[noreturn]] inline void usage_error(const std::string& what) {
    std::fprintf(stderr, "hattn: %s (see hattn --help)\n", what.c_str());
    std::exit(kExitUsage);
}

// argv[i] as "--flag value" or "--flag=value": flag is the part before any '='; next() returns the
// value, stepping i past it when it is the following argument (a usage error names the flag,
// after `context`, when there is none).
class FlagArg {
  public:
    FlagArg(int argc, char** argv, int& i, std::string context)
        : flag(argv[i]), argc_(argc), argv_(argv), i_(i), context_(std::move(context)) {
        const size_t eq = flag.find('=');
        if (flag.rfind("--", 0) == 0 && eq != std::string::npos) {
            inline_value_ = flag.substr(eq + 1);
            flag = flag.substr(0, eq);
            has_inline_value_ = true;
        }
    }
    bool has_inline_value() const { return has_inline_value_; }
    std::string next() {
        if (has_inline_value_) return inline_value_;
        if (i_ + 1 >= argc_) usage_error(context_ + flag + " needs a value");
        return argv_[++i_];
    }
    std::string flag;

  private:
    int argc_;
    char** argv_;
    int& i_;
    std::string context_;
    std::string inline_value_;
    bool has_inline_value_ = false;
};

inline int parse_int(const std::string& flag, const char* text) {
    char* end = nullptr;
    errno = 0;
    const long value = std::strtol(text, &end, 10);
    if (end == text || *end != '\0' || errno != 0 || value < INT32_MIN || value > INT32_MAX) {
        usage_error(flag + " expects an integer, got '" + text + "'");
    }
    return static_cast<int>(value);
}

inline void check_cuda(cudaError_t rc, const char* what) {
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

// The forwards' optional scheduler workspace (hattn_fwd_params.workspace,
// hattn_fwd_fp8_params.schedule_workspace): zero-filled once, every call leaves it so; empty
// (NULL, 0 bytes) without `with`.
class ScheduleWorkspace : public DeviceBuffer {
public:
    explicit ScheduleWorkspace(bool with) : DeviceBuffer(with ? hattn_fwd_workspace_size() : 0, "alloc scheduler workspace") {
        if (with) check_cuda(cudaMemset(get(), 0, bytes()), "zero scheduler workspace");
    }
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
inline double forward_flops(const Options& o) {
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

// Backward FLOPs: five GEMMs of the same size (S, dP, dV, dK, dQ) against the forward's two, i.e.
// 2.5 x the forward's count (the convention of published numbers).
inline double backward_flops(const Options& o) { return 2.5 * forward_flops(o); }

inline double max_abs_16(const std::vector<uint16_t>& bits, hattn_dtype dtype) {
    double m = 0;
    for (uint16_t b : bits) m = std::max(m, std::fabs(static_cast<double>(hattn::numerics::half_to_float(b, dtype))));
    return m;
}

// One line per checked tensor, and its worst element when it fails. Returns cmp.ok.
inline bool report(const char* what, const char* layout, const hattn::numerics::CompareResult& cmp, const std::string& bounds,
            const int64_t dims[4]) {
    std::printf("verify %-4s %-15s max abs err %.3e, rel L2 %.3e (bounds: %s)\n", what, layout, cmp.max_abs_err,
                cmp.rel_l2, bounds.c_str());
    if (!cmp.ok) {
        std::printf("  %s\n  worst element %s\n", cmp.summary().c_str(),
                    hattn::numerics::describe_index(cmp.worst_index, dims).c_str());
    }
    return cmp.ok;
}


template <class Launch>
inline double time_median(const Options& o, const char* api, Launch launch) {
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
        const hattn_status st = launch(stream);
        if (st != HATTN_SUCCESS) {
            std::fprintf(stderr, "hattn: %s failed during warm-up: %s\n", api, hattn_status_string(st));
            std::exit(kExitCuda);
        }
    }
    std::vector<float> times_ms;
    for (int it = 0; it < o.iters; ++it) {
        check_cuda(cudaMemsetAsync(flush.get(), it & 0xFF, flush.bytes(), stream), "L2 flush");
        check_cuda(cudaEventRecord(start, stream), "cudaEventRecord");
        const hattn_status st = launch(stream);
        check_cuda(cudaEventRecord(stop, stream), "cudaEventRecord");
        if (st != HATTN_SUCCESS) {
            std::fprintf(stderr, "hattn: %s failed while timing: %s\n", api, hattn_status_string(st));
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

inline void print_timing(const Options& o, double ms, double flops) {
    const char* dtype_name = o.e4m3 ? "e4m3" : o.dtype == HATTN_DTYPE_BF16 ? "bf16" : "fp16";
    const double peak = o.e4m3 ? kDenseFp8PeakTflops : kDenseBf16PeakTflops;
    const double tflops = flops / (ms * 1e-3) / 1e12;
    std::printf("time: %.4f ms (median of %d, L2 flushed), %.1f TFLOPS, %.1f%% of the %.0f TFLOPS dense %s peak\n", ms,
                o.iters, tflops, 100.0 * tflops / peak, peak, dtype_name);
}


inline int call_failed(const char* api, hattn_status st, hattn_status (*validate)(const void*, char*, size_t),
                const void* params) {
    char msg[512];
    const hattn_status again = validate(params, msg, sizeof(msg));
    std::fprintf(stderr, "hattn: %s failed: %s%s%s (last CUDA error: %s)\n", api, hattn_status_string(st),
                 again != HATTN_SUCCESS ? ": " : "", again != HATTN_SUCCESS ? msg : "",
                 cudaGetErrorString(cudaGetLastError()));
    return st == HATTN_ERROR_CUDA || st == HATTN_ERROR_UNSUPPORTED_DEVICE ? kExitCuda : kExitUsage;
}

inline hattn_status validate_fwd(const void* p, char* msg, size_t len) {
    return hattn_fwd_validate(static_cast<const hattn_fwd_params*>(p), msg, len);
}
inline hattn_status validate_bwd(const void* p, char* msg, size_t len) {
    return hattn_bwd_validate(static_cast<const hattn_bwd_params*>(p), msg, len);
}

// Validates params before touching the GPU; exits with kExitUsage and hattn's message if rejected.
inline void require_valid(hattn_status (*validate)(const void*, char*, size_t), const void* params) {
    char msg[512];
    const hattn_status valid = validate(params, msg, sizeof(msg));
    if (valid != HATTN_SUCCESS) {
        std::fprintf(stderr, "hattn: invalid parameters: %s: %s\n", hattn_status_string(valid), msg);
        std::exit(kExitUsage);
    }
}

// The device must be usable before anything is allocated or filled: no driver, no GPU or a
// non-Hopper GPU stops here with what is needed.
inline void require_hopper() {
    const std::string no_gpu = hattn::host::gpu_unavailable_reason();
    if (!no_gpu.empty()) {
        std::fprintf(stderr, "hattn: no usable NVIDIA GPU: %s. %s.\n", no_gpu.c_str(),
                     hattn::host::hopper_requirements().c_str());
        std::exit(kExitCuda);
    }
    const std::string not_hopper = hattn::host::hopper_unavailable_reason();
    if (!not_hopper.empty()) {
        std::fprintf(stderr, "hattn: %s\n", not_hopper.c_str());
        std::exit(kExitCuda);
    }
    int device = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    cudaDeviceProp prop;
    check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    std::printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
}

// The subcommands in their own files: `hattn fwd --dtype e4m3` (fwd_fp8.cu) and
// `hattn accuracy-fp8` (accuracy_fp8.cu, parses its own options from argv[first]).
int run_fwd_fp8(const Options& o);
int run_accuracy_fp8(int argc, char** argv, int first);

}  // namespace hattn::cli
