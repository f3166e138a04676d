// hattn/bench/fwd_fp8_ab.cu -- the FP8 forward's kernel variants (src/host/fwd_fp8_variants.h)
// against each other in one process: interleaved rounds (round r times every variant on every
// shape before round r + 1 starts; the variant order rotates per round), each variant's best
// round kept, so clock and power drift hit every variant alike.
//
//   fwd_fp8_ab [--variants base,lazy,...] [--grids auto,tiles,sms,h1,dyn] [--v-layouts rows,vt] [--head-dims 64,128,256]
//              [--seqlens 2048,8192,16384] [--masks full,causal] [--rounds 3] [--reps 10]
//              [--tokens 16384] [--width 2048] [--check-only] [--v-per-head]
//
// --grids runs each variant on each grid (Fp8FwdArgs::grid_ctas): auto (the launcher's rule: one
// persistent CTA per SM up to fwd_fp8's kPersistentMaxSeqlenK keys, else one CTA per tile), tiles
// (one CTA per tile), sms (one CTA per SM at any length), h1 (auto, tiles head by head instead
// of the causal sections, see sm90::TileScheduler), dyn (auto with a schedule workspace: causal
// problems and d64's partial full tiles take the dynamic walk). Columns are then named variant@grid,
// and with two grids or more a last table gives each grid's ratio to the first grid, per variant.
// --v-layouts: rows (V as the pre-pass writes it by default: the call transposes it into its
// workspace first) and vt (V^T from the pre-pass, HATTN_FP8_PREPASS_V_TRANSPOSED, passed with
// HATTN_FWD_FP8_V_TRANSPOSED: no transpose pass); vt columns are named +vt, and a last table
// gives each vt column's ratio to its rows column.
//
// --v-per-head: the pre-pass gives V one descale per head (HATTN_FP8_PREPASS_V_PER_HEAD): the
// kernels then see one V descale for all of a head's blocks.
// Inputs per shape: bf16 N(0, 1) Q, K, V (batch = tokens / seqlen, heads = width / head_dim)
// through hattn_fp8_prepass (random-sign Hadamard) into e4m3 and per-block descales, two input
// sets rotated from call to call (a K or V tensor of e4m3 is 32 MB at 16k tokens: most of one
// set would stay in the 50 MB L2). Timed: the whole hattn_fwd_fp8 call (its V^T pass included),
// no LSE, bf16 O, events around each call queued behind a spin kernel (no host time inside).
// Before timing, every column's O is checked against the first column's on the first set
// (finite, relative L2 below kMaxRelL2VsBase; the accuracy against float64 is fwd_fp8_test's).
// TFLOPS = 4 b h s^2 d / time (half for causal). Prints one TFLOPS table, then each column's ratio
// to the first (base on the first grid) and, with two grids or more, each grid's ratio to the first
// grid per variant, last. Exit status 3 when a check failed, 1 on a CUDA or API error.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "comma_list.h"
#include "hattn.h"
#include "host/fwd_fp8_variants.h"
#include "testing/device_random.cuh"
#include "testing/numerics.h"

namespace {

using hattn::host::kFp8VariantCount;
using hattn::host::kFp8Variants;

constexpr double kMaxRelL2VsBase = 5e-2;
constexpr int kExitWrong = 3;
constexpr int kInputSets = 2;
constexpr int kWarmupCalls = 2;
constexpr long long kSpinCycles = 20'000'000;  // ~10 ms ahead of the timed calls
constexpr uint64_t kSeed = 0xab8ull;
constexpr uint64_t kHadamardSeed = 0x5eedull;

#define AB_CHECK(expr)                                                                                    \
    do {                                                                                                  \
        const cudaError_t rc_ = (expr);                                                                   \
        if (rc_ != cudaSuccess) {                                                                         \
            std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(rc_)); \
            std::exit(1);                                                                                 \
        }                                                                                                 \
    } while (0)

__global__ void spin_kernel(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

// The grids --grids names; kOneCtaPerTile is more CTAs than any problem has tiles (the launcher
// takes min(grid_ctas, tiles)). h1: the automatic grid with the tiles in head-by-head order
// (Fp8FwdArgs::section_heads = 1, the order before causal sections). dyn: the automatic grid given
// a schedule workspace (hattn_fwd_fp8_params.schedule_workspace: causal problems and d64's
// partial full tiles take the dynamic walk); the other grids run without one.
enum class Grid { kAuto, kTiles, kSms, kAutoHeadByHead, kDynamic };
constexpr int kOneCtaPerTile = INT_MAX;
const char* grid_name(Grid g) {
    return g == Grid::kAuto ? "auto" : g == Grid::kTiles ? "tiles" : g == Grid::kSms ? "sms" : g == Grid::kDynamic ? "dyn" : "h1";
}

Grid grid_of(const std::string& name) {
    for (Grid g : {Grid::kAuto, Grid::kTiles, Grid::kSms, Grid::kAutoHeadByHead, Grid::kDynamic})
        if (name == grid_name(g)) return g;
    std::fprintf(stderr, "unknown grid %s (known: auto tiles sms h1 dyn)\n", name.c_str());
    std::exit(1);
}

struct Options {
    std::vector<int> variants, head_dims{64, 128, 256}, seqlens{2048, 8192, 16384};
    std::vector<Grid> grids{Grid::kAuto};
    std::vector<bool> v_transposed{false};
    std::vector<bool> causal{false, true};
    int rounds = 3, reps = 10, tokens = 16384, width = 2048;
    bool check_only = false;
    bool v_per_head = false;  // the pre-pass's one V descale per head
};

using hattn::bench::split_commas;

int variant_index(const std::string& name) {
    for (int v = 0; v < kFp8VariantCount; ++v)
        if (name == kFp8Variants[v].name) return v;
    std::fprintf(stderr, "unknown variant %s (known:", name.c_str());
    for (int v = 0; v < kFp8VariantCount; ++v) std::fprintf(stderr, " %s", kFp8Variants[v].name);
    std::fprintf(stderr, ")\n");
    std::exit(1);
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "%s needs a value\n", a.c_str());
                std::exit(1);
            }
            return argv[++i];
        };
        auto ints = [&] {
            std::vector<int> v;
            for (const std::string& x : split_commas(value())) v.push_back(std::atoi(x.c_str()));
            return v;
        };
        if (a == "--variants") {
            for (const std::string& n : split_commas(value())) o.variants.push_back(variant_index(n));
        } else if (a == "--grids") {
            o.grids.clear();
            for (const std::string& n : split_commas(value())) o.grids.push_back(grid_of(n));
        } else if (a == "--v-layouts") {
            o.v_transposed.clear();
            for (const std::string& n : split_commas(value())) {
                if (n != "rows" && n != "vt") {
                    std::fprintf(stderr, "unknown V layout %s (known: rows vt)\n", n.c_str());
                    std::exit(1);
                }
                o.v_transposed.push_back(n == "vt");
            }
        } else if (a == "--head-dims") {
            o.head_dims = ints();
        } else if (a == "--seqlens") {
            o.seqlens = ints();
        } else if (a == "--masks") {
            o.causal.clear();
            for (const std::string& m : split_commas(value())) o.causal.push_back(m == "causal");
        } else if (a == "--rounds") {
            o.rounds = std::atoi(value().c_str());
        } else if (a == "--reps") {
            o.reps = std::atoi(value().c_str());
        } else if (a == "--tokens") {
            o.tokens = std::atoi(value().c_str());
        } else if (a == "--width") {
            o.width = std::atoi(value().c_str());
        } else if (a == "--check-only") {
            o.check_only = true;
        } else if (a == "--v-per-head") {
            o.v_per_head = true;
        } else {
            std::fprintf(stderr, "unknown argument %s\n", a.c_str());
            std::exit(1);
        }
    }
    if (o.variants.empty())
        for (int v = 0; v < kFp8VariantCount; ++v) o.variants.push_back(v);
    // base (index 0) is every check's reference and the ratios' denominator: always run, first.
    o.variants.erase(std::remove(o.variants.begin(), o.variants.end(), 0), o.variants.end());
    o.variants.insert(o.variants.begin(), 0);
    if (o.grids.empty() || o.v_transposed.empty()) {
        std::fprintf(stderr, "--grids and --v-layouts need at least one value each\n");
        std::exit(1);
    }
    return o;
}

// One column of the tables: a variant on a grid. Entry 0 (base on the first grid) is every
// check's reference and the ratios' denominator.
struct Entry {
    int variant;
    Grid grid;
    int grid_ctas;  // Fp8FwdArgs::grid_ctas for this grid
    int section_heads;  // Fp8FwdArgs::section_heads
    std::string name;
    bool vt;        // V^T from the pre-pass (no transpose pass)
};

std::vector<Entry> entries_of(const Options& o) {
    int sms = 0;
    if (std::find(o.grids.begin(), o.grids.end(), Grid::kSms) != o.grids.end()) {
        int device = 0;
        AB_CHECK(cudaGetDevice(&device));
        AB_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    }
    const bool named_by_grid = o.grids.size() > 1 || o.grids[0] != Grid::kAuto;
    // Layout-major, then variant-major (the ng grids of one variant consecutive).
    std::vector<Entry> entries;
    for (bool vt : o.v_transposed)
        for (int v : o.variants)
            for (Grid g : o.grids) {
                const int ctas = g == Grid::kTiles ? kOneCtaPerTile : g == Grid::kSms ? sms : 0;
                const int section_heads = g == Grid::kAutoHeadByHead ? 1 : 0;
                std::string name = kFp8Variants[v].name;
                if (named_by_grid) name += std::string("@") + grid_name(g);
                if (vt) name += "+vt";
                entries.push_back({v, g, ctas, section_heads, name, vt});
            }
    return entries;
}

struct DeviceBuffer {
    void* ptr = nullptr;
    explicit DeviceBuffer(size_t bytes) { AB_CHECK(cudaMalloc(&ptr, bytes)); }
    ~DeviceBuffer() { cudaFree(ptr); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct Shape {
    int d, s, b, h;
    bool causal;
    std::string label() const {
        char buf[64];
        std::snprintf(buf, sizeof buf, "d%d s%d %s", d, s, causal ? "causal" : "full");
        return buf;
    }
    double flops() const { return 4.0 * b * h * static_cast<double>(s) * s * d * (causal ? 0.5 : 1.0); }
};

// One shape's device data: kInputSets e4m3 sets with descales, O, the V^T workspace.
struct ShapeData {
    Shape shape;
    size_t elems, blocks;
    std::vector<DeviceBuffer*> owned;
    void* fp8[kInputSets][3];
    float* descale[kInputSets][3];
    void* vt[kInputSets];  // V^T of each set, written by the pre-pass
    void* o;
    void* ws;
    size_t ws_bytes;
    void* schedule;  // the scheduler's workspace (zero-filled; every call leaves it so)

    void* alloc(size_t bytes) {
        owned.push_back(new DeviceBuffer(bytes));
        return owned.back()->ptr;
    }
    bool v_per_head;
    ShapeData(const Shape& sh, bool per_head) : shape(sh), v_per_head(per_head) {
        elems = static_cast<size_t>(sh.b) * sh.s * sh.h * sh.d;
        blocks = static_cast<size_t>(sh.b) * sh.h * ((sh.s + HATTN_FP8_BLOCK_ROWS - 1) / HATTN_FP8_BLOCK_ROWS);
        DeviceBuffer bf16(3 * elems * 2);
        for (int set = 0; set < kInputSets; ++set) {
            void* in[3];
            for (int t = 0; t < 3; ++t) {
                in[t] = static_cast<char*>(bf16.ptr) + t * elems * 2;
                AB_CHECK(hattn::testing::fill_normal(in[t], elems, HATTN_DTYPE_BF16, kSeed + 3 * set + t, 1.f, nullptr));
                fp8[set][t] = alloc(elems);
                descale[set][t] = static_cast<float*>(alloc(blocks * sizeof(float)));
            }
            hattn_fp8_prepass_params pp = hattn_fp8_prepass_params_contiguous(
                in[0], in[1], in[2], fp8[set][0], fp8[set][1], fp8[set][2], descale[set][0], descale[set][1],
                descale[set][2], sh.b, sh.h, sh.h, sh.s, sh.s, sh.d, HATTN_DTYPE_BF16);
            pp.hadamard = 1;
            pp.hadamard_seed = kHadamardSeed;
            if (per_head) pp.flags = HATTN_FP8_PREPASS_V_PER_HEAD;
            ws_bytes = hattn_fwd_fp8_workspace_size(sh.b, sh.h, sh.s, sh.d);
            vt[set] = alloc(ws_bytes);
            hattn_fp8_prepass_params ppt = pp;  // the same call writing V^T (q, k, descales identical)
            ppt.v_fp8 = vt[set];
            ppt.flags = HATTN_FP8_PREPASS_V_TRANSPOSED | pp.flags;
            for (const hattn_fp8_prepass_params* call : {&pp, &ppt}) {
                const hattn_status st = hattn_fp8_prepass(call, nullptr);
                if (st != HATTN_SUCCESS) {
                    std::fprintf(stderr, "%s: hattn_fp8_prepass: %s\n", sh.label().c_str(), hattn_status_string(st));
                    std::exit(1);
                }
            }
        }
        o = alloc(elems * 2);
        ws = alloc(ws_bytes);
        schedule = alloc(hattn_fwd_workspace_size());
        AB_CHECK(cudaMemset(schedule, 0, hattn_fwd_workspace_size()));
        AB_CHECK(cudaDeviceSynchronize());
    }
    ~ShapeData() {
        for (DeviceBuffer* b : owned) delete b;
    }
    hattn_fwd_fp8_params params(int set, bool v_transposed, bool dynamic) const {
        hattn_fwd_fp8_params p = hattn_fwd_fp8_params_contiguous(
            fp8[set][0], fp8[set][1], fp8[set][2], o, descale[set][0], descale[set][1], descale[set][2], shape.b,
            shape.h, shape.h, shape.s, shape.s, shape.d, HATTN_DTYPE_BF16);
        p.causal = shape.causal ? 1 : 0;
        p.workspace = ws;
        p.workspace_size = ws_bytes;
        if (v_transposed) {
            p.v = vt[set];
            p.flags |= HATTN_FWD_FP8_V_TRANSPOSED;
            p.workspace = nullptr;
            p.workspace_size = 0;
        }
        if (dynamic) {
            p.schedule_workspace = schedule;
            p.schedule_workspace_size = hattn_fwd_workspace_size();
        }
        return p;
    }
};

hattn_status run(const Entry& e, const hattn_fwd_fp8_params& p) {
    return hattn::host::fwd_fp8_variant(e.variant, &p, nullptr, e.grid_ctas, e.section_heads);
}

std::vector<uint16_t> download_o(const ShapeData& data) {
    std::vector<uint16_t> o(data.elems);
    AB_CHECK(cudaMemcpy(o.data(), data.o, data.elems * 2, cudaMemcpyDeviceToHost));
    return o;
}

// Relative L2 of a against b (bf16 codes); NaN when a has a non-finite value.
double rel_l2(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
    if (a.size() != b.size() || a.empty()) return NAN;  // no reference (base failed)
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        const double x = hattn::numerics::bf16_to_float(a[i]), y = hattn::numerics::bf16_to_float(b[i]);
        if (!std::isfinite(x)) return NAN;
        num += (x - y) * (x - y);
        den += y * y;
    }
    return std::sqrt(num / den);
}

// Median milliseconds of `reps` calls (sets rotated), after warm-up calls.
double time_ms(const Entry& entry, const ShapeData& data, int reps, bool* failed) {
    hattn_fwd_fp8_params p[kInputSets];
    for (int set = 0; set < kInputSets; ++set) p[set] = data.params(set, entry.vt, entry.grid == Grid::kDynamic);
    for (int i = 0; i < kWarmupCalls; ++i)
        if (run(entry, p[i % kInputSets]) != HATTN_SUCCESS) *failed = true;
    std::vector<cudaEvent_t> start(reps), stop(reps);
    for (int r = 0; r < reps; ++r) {
        AB_CHECK(cudaEventCreate(&start[r]));
        AB_CHECK(cudaEventCreate(&stop[r]));
    }
    spin_kernel<<<1, 1>>>(kSpinCycles);
    AB_CHECK(cudaGetLastError());
    for (int r = 0; r < reps; ++r) {
        AB_CHECK(cudaEventRecord(start[r], nullptr));
        if (run(entry, p[r % kInputSets]) != HATTN_SUCCESS) *failed = true;
        AB_CHECK(cudaEventRecord(stop[r], nullptr));
    }
    AB_CHECK(cudaDeviceSynchronize());
    std::vector<float> ms(reps);
    for (int r = 0; r < reps; ++r) {
        AB_CHECK(cudaEventElapsedTime(&ms[r], start[r], stop[r]));
        AB_CHECK(cudaEventDestroy(start[r]));
        AB_CHECK(cudaEventDestroy(stop[r]));
    }
    std::nth_element(ms.begin(), ms.begin() + reps / 2, ms.end());
    return ms[reps / 2];
}

}  // namespace

int main(int argc, char** argv) {
    const Options opt = parse(argc, argv);
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::fprintf(stderr, "no CUDA device\n");
        return 1;
    }
    std::vector<Shape> shapes;
    for (int d : opt.head_dims)
        for (int s : opt.seqlens)
            for (bool causal : opt.causal) shapes.push_back({d, s, std::max(1, opt.tokens / s), opt.width / d, causal});

    const std::vector<Entry> entries = entries_of(opt);
    const size_t ne = entries.size();
    std::vector<std::string> failures;
    // best[shape][entry] (ms; INFINITY until timed), err[shape][entry] (rel L2 vs entry 0),
    // skip[shape][entry] (not built for the shape's head dim, or failed).
    std::vector<std::vector<double>> best(shapes.size(), std::vector<double>(ne, INFINITY));
    std::vector<std::vector<double>> err(shapes.size(), std::vector<double>(ne, 0.0));
    std::vector<std::vector<bool>> skip(shapes.size(), std::vector<bool>(ne, false));
    for (int round = 0; round < (opt.check_only ? 1 : opt.rounds); ++round) {
        for (size_t si = 0; si < shapes.size(); ++si) {
            const ShapeData data(shapes[si], opt.v_per_head);  // made per round: one shape's tensors on the GPU at a time
            if (round == 0) {
                // Correctness against base (on the first grid) on the first set.
                std::vector<uint16_t> ref;
                for (size_t ei = 0; ei < ne; ++ei) {
                    const Entry& e = entries[ei];
                    if (!hattn::host::fp8_variant_built(e.variant, shapes[si].d)) {
                        skip[si][ei] = true;
                        continue;
                    }
                    AB_CHECK(cudaMemset(data.o, 0xFF, data.elems * 2));  // NaN poison
                    const hattn_status st = run(e, data.params(0, e.vt, e.grid == Grid::kDynamic));
                    AB_CHECK(cudaDeviceSynchronize());
                    if (st != HATTN_SUCCESS) {
                        failures.push_back(e.name + " " + shapes[si].label() + ": " + hattn_status_string(st));
                        skip[si][ei] = true;
                        continue;
                    }
                    std::vector<uint16_t> o = download_o(data);
                    if (ei == 0) {
                        ref = std::move(o);
                        err[si][ei] = rel_l2(ref, ref);
                    } else {
                        err[si][ei] = rel_l2(o, ref);
                    }
                    if (!(err[si][ei] < kMaxRelL2VsBase)) {
                        char buf[160];
                        std::snprintf(buf, sizeof buf, "%s %s: rel L2 vs %s %.3e", e.name.c_str(),
                                      shapes[si].label().c_str(), entries[0].name.c_str(), err[si][ei]);
                        failures.push_back(buf);
                    }
                }
                if (opt.check_only) continue;
            }
            for (size_t k = 0; k < ne; ++k) {
                const size_t ei = (k + round) % ne;  // rotate: no entry always runs first
                if (skip[si][ei]) continue;
                bool failed = false;
                const double ms = time_ms(entries[ei], data, opt.reps, &failed);
                if (failed) {
                    failures.push_back(entries[ei].name + " " + shapes[si].label() + ": a timed call failed");
                    skip[si][ei] = true;
                    continue;
                }
                best[si][ei] = std::min(best[si][ei], ms);
            }
        }
        std::fprintf(stderr, "round %d/%d done\n", round + 1, opt.rounds);
    }

    if (opt.check_only) {
        std::printf("| shape |");
        for (const Entry& e : entries) std::printf(" %s rel L2 vs %s |", e.name.c_str(), entries[0].name.c_str());
        std::printf("\n");
        for (size_t si = 0; si < shapes.size(); ++si) {
            std::printf("| %s |", shapes[si].label().c_str());
            for (size_t ei = 0; ei < ne; ++ei)
                if (skip[si][ei]) std::printf(" - |");
                else std::printf(" %.2e |", err[si][ei]);
            std::printf("\n");
        }
    } else {
        auto tflops = [&](size_t si, size_t ei) { return shapes[si].flops() / (best[si][ei] * 1e-3) / 1e12; };
        std::printf("TFLOPS (best of %d rounds, median of %d calls each; hattn_fwd_fp8 incl. its V^T pass)\n", opt.rounds,
                    opt.reps);
        std::printf("| shape |");
        for (const Entry& e : entries) std::printf(" %s |", e.name.c_str());
        std::printf(" err vs %s (max over the others) |\n", entries[0].name.c_str());
        for (size_t si = 0; si < shapes.size(); ++si) {
            std::printf("| %s |", shapes[si].label().c_str());
            double worst = 0;
            for (size_t ei = 0; ei < ne; ++ei) {
                if (skip[si][ei] || !std::isfinite(best[si][ei])) std::printf(" - |");
                else std::printf(" %.0f |", tflops(si, ei));
                if (!skip[si][ei]) worst = std::max(worst, err[si][ei]);
            }
            std::printf(" %.1e |\n", worst);
        }
        // One table of speed ratios: column c is entry num[c]'s TFLOPS over entry den[c]'s (named
        // "num / den" when the denominators differ from column to column).
        auto print_ratios = [&](const char* title, const std::vector<size_t>& num, const std::vector<size_t>& den,
                                bool name_den) {
            std::printf("\n%s; last row: geomean over the shapes\n| shape |", title);
            for (size_t c = 0; c < num.size(); ++c) {
                if (!name_den) std::printf(" %s |", entries[num[c]].name.c_str());
                else std::printf(" %s / %s |", entries[num[c]].name.c_str(), entries[den[c]].name.c_str());
            }
            std::printf("\n");
            std::vector<double> log_sum(num.size(), 0.0);
            std::vector<int> count(num.size(), 0);
            for (size_t si = 0; si < shapes.size(); ++si) {
                std::printf("| %s |", shapes[si].label().c_str());
                for (size_t c = 0; c < num.size(); ++c) {
                    const size_t a = num[c], b = den[c];
                    const bool ok = !skip[si][a] && !skip[si][b] && std::isfinite(best[si][a]) && std::isfinite(best[si][b]);
                    if (!ok) {
                        std::printf(" - |");
                        continue;
                    }
                    const double r = best[si][b] / best[si][a];
                    log_sum[c] += std::log(r);
                    ++count[c];
                    std::printf(" %.3f |", r);
                }
                std::printf("\n");
            }
            std::printf("| geomean |");
            for (size_t c = 0; c < num.size(); ++c)
                if (count[c]) std::printf(" %.3f |", std::exp(log_sum[c] / count[c]));
                else std::printf(" - |");
            std::printf("\n");
        };
        std::vector<size_t> num, den;
        for (size_t ei = 1; ei < ne; ++ei) {
            num.push_back(ei);
            den.push_back(0);
        }
        char title[128];
        std::snprintf(title, sizeof title, "ratio to %s (TFLOPS / its TFLOPS)", entries[0].name.c_str());
        print_ratios(title, num, den, false);
        // Entries are variant-major: the ng grids of one variant are consecutive, the first grid first.
        const size_t ng = opt.grids.size();
        if (ng > 1) {
            num.clear();
            den.clear();
            for (size_t first = 0; first < ne; first += ng)
                for (size_t g = 1; g < ng; ++g) {
                    num.push_back(first + g);
                    den.push_back(first);
                }
            std::snprintf(title, sizeof title, "ratio of each grid to %s, per variant (TFLOPS / its TFLOPS)",
                          grid_name(opt.grids[0]));
            print_ratios(title, num, den, true);
        }
        // Layout-major: block l holds the variants x grids of layout l, in the same order.
        const size_t nl = opt.v_transposed.size(), block = ne / nl;
        if (nl > 1) {
            num.clear();
            den.clear();
            for (size_t l = 1; l < nl; ++l)
                for (size_t j = 0; j < block; ++j) {
                    num.push_back(l * block + j);
                    den.push_back(j);
                }
            print_ratios("ratio of each V layout to the first, per variant and grid (TFLOPS / its TFLOPS)", num, den, true);
        }
    }
    if (!failures.empty()) {
        std::printf("%zu FAILURES:\n", failures.size());
        for (const std::string& f : failures) std::printf("  %s\n", f.c_str());
        return kExitWrong;
    }
    return 0;
}
