// hattn/test/ptx_ldst_test.cu -- ldmatrix / stmatrix x4 (+ .trans) (ptx/ldst.cuh) against the
// fragment layout of PTX ISA 9.7.14.5.15-16:
//
//   Lanes 8 j .. 8 j + 7 supply the 8 row addresses (16 bytes each) of matrix j (j = 0..3).
//   Register j of lane t holds matrix j's elements
//     plain:  row t / 4,          columns 2 (t % 4) and 2 (t % 4) + 1   (low half = lower column)
//     .trans: rows 2 (t % 4) and 2 (t % 4) + 1, column t / 4           (low half = lower row)
//
// Row addresses are a random permutation of rows of a larger buffer, so each lane's address is
// honoured individually; unaddressed rows must keep their poison after a stmatrix.
//
// The plain vector accesses through the shared window: st_shared_v4_f32 from every thread of a
// CTA into a random 16-byte slot each, then ld_shared_v2_f32 over the whole buffer (8-byte steps,
// so half the loads start mid-slot); every bit pattern must come back, and the slots nobody
// stored to must keep their poison. The 4-byte forms likewise (st/ld.shared.b32), read back
// through st.global.b32.
#include "gpu_test_util.h"
#include "ptx_test_util.cuh"

#include "ptx/hattn_ptx.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <numeric>
#include <random>
#include <vector>

namespace {

using hattn::test::DeviceBuffer;
using hattn::test::kWarpSize;

constexpr int kMatrices = 4;
constexpr int kMatrixRows = 8;
constexpr int kRowElems = 8;                 // 8 x 16-bit = one 16-byte row
constexpr int kBufferRows = 48;              // 32 addressed rows + 16 that must stay untouched
constexpr int kBufferElems = kBufferRows * kRowElems;
constexpr uint16_t kPoison = 0xFFFF;         // data values stay below 0x8000

enum class Op { kLoad, kLoadTrans, kStore, kStoreTrans, kRoundTrip, kRoundTripTrans };

// kLoad*: frag[lane * 4 + j] = register j after ldmatrix from buffer `src`.
// kStore*: stmatrix of frag into a poisoned buffer, dumped to `dst`.
// kRoundTrip*: ldmatrix from `src` at rows_in, stmatrix at rows_out of a poisoned buffer -> `dst`.
__global__ void ldst_kernel(Op op, const uint16_t* src, const int* rows_in, const int* rows_out, uint32_t* frag,
                            uint16_t* dst) {
    __shared__ alignas(16) uint16_t in_buf[kBufferElems];
    __shared__ alignas(16) uint16_t out_buf[kBufferElems];
    const int lane = threadIdx.x;
    for (int i = lane; i < kBufferElems; i += kWarpSize) {
        in_buf[i] = src[i];
        out_buf[i] = kPoison;
    }
    __syncwarp();
    const uint16_t* load_row = in_buf + rows_in[lane] * kRowElems;
    uint16_t* store_row = out_buf + rows_out[lane] * kRowElems;
    uint32_t r[kMatrices];
    switch (op) {
        case Op::kLoad:
            hattn::ptx::ldmatrix_x4(r, load_row);
            break;
        case Op::kLoadTrans:
            hattn::ptx::ldmatrix_x4_trans(r, load_row);
            break;
        case Op::kStore:
        case Op::kStoreTrans:
            for (int j = 0; j < kMatrices; ++j) r[j] = frag[lane * kMatrices + j];
            if (op == Op::kStore) {
                hattn::ptx::stmatrix_x4(store_row, r);
            } else {
                hattn::ptx::stmatrix_x4_trans(store_row, r);
            }
            break;
        case Op::kRoundTrip:
            hattn::ptx::ldmatrix_x4(r, load_row);
            hattn::ptx::stmatrix_x4(store_row, r);
            break;
        case Op::kRoundTripTrans:
            hattn::ptx::ldmatrix_x4_trans(r, load_row);
            hattn::ptx::stmatrix_x4_trans(store_row, r);
            break;
    }
    __syncwarp();
    if (op == Op::kLoad || op == Op::kLoadTrans) {
        for (int j = 0; j < kMatrices; ++j) frag[lane * kMatrices + j] = r[j];
    } else {
        for (int i = lane; i < kBufferElems; i += kWarpSize) dst[i] = out_buf[i];
    }
}

// Matrix element (row, col) of matrix j as lane t / register j / half h sees it.
struct FragSlot {
    int lane, half;
};
FragSlot slot_of(int row, int col, bool trans) {
    return trans ? FragSlot{4 * col + row / 2, row % 2} : FragSlot{4 * row + col / 2, col % 2};
}

struct Fixture {
    std::vector<uint16_t> src;   // distinct values < 0x8000
    std::vector<int> rows_in;    // row address of each lane
    std::vector<int> rows_out;
};

Fixture make_fixture(uint64_t seed) {
    std::mt19937_64 rng(seed);
    Fixture f;
    f.src.resize(kBufferElems);
    std::iota(f.src.begin(), f.src.end(), uint16_t{0x1000});
    std::shuffle(f.src.begin(), f.src.end(), rng);
    std::vector<int> rows(kBufferRows);
    std::iota(rows.begin(), rows.end(), 0);
    std::shuffle(rows.begin(), rows.end(), rng);
    f.rows_in.assign(rows.begin(), rows.begin() + kWarpSize);
    std::shuffle(rows.begin(), rows.end(), rng);
    f.rows_out.assign(rows.begin(), rows.begin() + kWarpSize);
    return f;
}

// Runs the kernel; returns (frag, dst).
void run(Op op, const Fixture& f, std::vector<uint32_t>& frag, std::vector<uint16_t>& dst) {
    DeviceBuffer<uint16_t> d_src(kBufferElems), d_dst(kBufferElems);
    DeviceBuffer<int> d_in(kWarpSize), d_out(kWarpSize);
    DeviceBuffer<uint32_t> d_frag(kWarpSize * kMatrices);
    HATTN_CUDA_CHECK(d_src.status);
    HATTN_CUDA_CHECK(d_dst.status);
    HATTN_CUDA_CHECK(d_in.status);
    HATTN_CUDA_CHECK(d_out.status);
    HATTN_CUDA_CHECK(d_frag.status);
    HATTN_CUDA_CHECK(cudaMemcpy(d_src.ptr, f.src.data(), d_src.bytes(), cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemcpy(d_in.ptr, f.rows_in.data(), d_in.bytes(), cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemcpy(d_out.ptr, f.rows_out.data(), d_out.bytes(), cudaMemcpyHostToDevice));
    frag.resize(kWarpSize * kMatrices, 0xFFFFFFFFu);
    HATTN_CUDA_CHECK(cudaMemcpy(d_frag.ptr, frag.data(), d_frag.bytes(), cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemset(d_dst.ptr, 0, d_dst.bytes()));
    ldst_kernel<<<1, kWarpSize>>>(op, d_src.ptr, d_in.ptr, d_out.ptr, d_frag.ptr, d_dst.ptr);
    HATTN_CUDA_CHECK(cudaGetLastError());
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());
    HATTN_CUDA_CHECK(cudaMemcpy(frag.data(), d_frag.ptr, d_frag.bytes(), cudaMemcpyDeviceToHost));
    dst.resize(kBufferElems);
    HATTN_CUDA_CHECK(cudaMemcpy(dst.data(), d_dst.ptr, d_dst.bytes(), cudaMemcpyDeviceToHost));
}

uint16_t half_of(uint32_t reg, int half) { return static_cast<uint16_t>(reg >> (16 * half)); }

void check_load(bool trans, uint64_t seed) {
    const Fixture f = make_fixture(seed);
    std::vector<uint32_t> frag;
    std::vector<uint16_t> dst;
    run(trans ? Op::kLoadTrans : Op::kLoad, f, frag, dst);
    if (::testing::Test::HasFatalFailure()) return;
    int bad = 0;
    for (int j = 0; j < kMatrices; ++j) {
        for (int row = 0; row < kMatrixRows; ++row) {
            for (int col = 0; col < kRowElems; ++col) {
                // matrix j, row `row` lives at the address lane 8 j + row supplied
                const uint16_t want = f.src[f.rows_in[kMatrixRows * j + row] * kRowElems + col];
                const FragSlot s = slot_of(row, col, trans);
                const uint16_t got = half_of(frag[s.lane * kMatrices + j], s.half);
                if (got != want && ++bad <= 8) {
                    ADD_FAILURE() << "matrix " << j << " (" << row << ", " << col << "): lane " << s.lane << " half "
                                  << s.half << " holds 0x" << std::hex << got << ", want 0x" << want << std::dec;
                }
            }
        }
    }
    EXPECT_EQ(bad, 0);
}

void check_store(bool trans, uint64_t seed) {
    const Fixture f = make_fixture(seed);
    std::vector<uint32_t> frag(kWarpSize * kMatrices);
    for (size_t i = 0; i < frag.size(); ++i) {  // distinct halves: (lane, reg, half) -> value
        frag[i] = (static_cast<uint32_t>(0x2000 + 2 * i + 1) << 16) | static_cast<uint32_t>(0x2000 + 2 * i);
    }
    // run() uploads `frag` before the launch and overwrites it with the (unchanged) download
    std::vector<uint32_t> frag_io = frag;
    std::vector<uint16_t> dst;
    run(trans ? Op::kStoreTrans : Op::kStore, f, frag_io, dst);
    if (::testing::Test::HasFatalFailure()) return;
    std::vector<uint16_t> want(kBufferElems, kPoison);
    for (int j = 0; j < kMatrices; ++j) {
        for (int row = 0; row < kMatrixRows; ++row) {
            for (int col = 0; col < kRowElems; ++col) {
                const FragSlot s = slot_of(row, col, trans);
                want[f.rows_out[kMatrixRows * j + row] * kRowElems + col] = half_of(frag[s.lane * kMatrices + j], s.half);
            }
        }
    }
    int bad = 0;
    for (int i = 0; i < kBufferElems; ++i) {
        if (dst[i] != want[i] && ++bad <= 8) {
            ADD_FAILURE() << "smem row " << i / kRowElems << " col " << i % kRowElems << ": 0x" << std::hex << dst[i]
                          << ", want 0x" << want[i] << std::dec;
        }
    }
    EXPECT_EQ(bad, 0);
}

void check_round_trip(bool trans, uint64_t seed) {
    const Fixture f = make_fixture(seed);
    std::vector<uint32_t> frag;
    std::vector<uint16_t> dst;
    run(trans ? Op::kRoundTripTrans : Op::kRoundTrip, f, frag, dst);
    if (::testing::Test::HasFatalFailure()) return;
    std::vector<uint16_t> want(kBufferElems, kPoison);
    for (int lane = 0; lane < kWarpSize; ++lane) {
        std::copy_n(f.src.begin() + f.rows_in[lane] * kRowElems, kRowElems,
                    want.begin() + f.rows_out[lane] * kRowElems);
    }
    EXPECT_EQ(dst, want) << "stmatrix" << (trans ? ".trans" : "") << " did not invert ldmatrix"
                         << (trans ? ".trans" : "");
}

// ---- ld.shared.v2.f32 / st.shared.v4.f32 ------------------------------------------------------

constexpr int kVecThreads = 128;
constexpr int kVecSlots = 160;  // 16-byte slots: 128 stored to, 32 left poisoned
constexpr int kVecFloats = 4 * kVecSlots;
constexpr uint32_t kVecPoison = 0xFFFFFFFFu;  // an f32 NaN no input uses

// Thread t stores in[4 t .. 4 t + 3] into slot slot_of_thread[t]; out receives the whole buffer.
__global__ void __launch_bounds__(kVecThreads) shared_vector_kernel(const float* in, const int* slot_of_thread,
                                                                     float* out) {
    __shared__ alignas(16) float buf[kVecFloats];
    for (int i = threadIdx.x; i < kVecFloats; i += kVecThreads) buf[i] = __uint_as_float(kVecPoison);
    __syncthreads();
    const int t = threadIdx.x;
    hattn::ptx::st_shared_v4_f32(&buf[4 * slot_of_thread[t]], in[4 * t], in[4 * t + 1], in[4 * t + 2], in[4 * t + 3]);
    __syncthreads();
    for (int p = threadIdx.x; p < kVecFloats / 2; p += kVecThreads) {
        const float2 v = hattn::ptx::ld_shared_v2_f32(&buf[2 * p]);
        out[2 * p] = v.x;
        out[2 * p + 1] = v.y;
    }
}

uint32_t bits_of(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    return u;
}

float float_of(uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
}

// ---- ld.shared.b32 / st.shared.b32, st.global.b32 ----------------------------------------------

constexpr int kWordThreads = 128;
constexpr int kWordSlots = 160;  // 4-byte slots: 128 stored to, 32 left poisoned

// Thread t stores in[t] into word slot_of_thread[t] (st.shared.b32); after the barrier every
// word of the buffer is read back (ld.shared.b32) and written out with st.global.b32.
__global__ void __launch_bounds__(kWordThreads) shared_word_kernel(const uint32_t* in, const int* slot_of_thread,
                                                                    uint32_t* out) {
    __shared__ alignas(16) uint32_t buf[kWordSlots];
    for (int i = threadIdx.x; i < kWordSlots; i += kWordThreads) buf[i] = kVecPoison;
    __syncthreads();
    hattn::ptx::st_shared_b32(&buf[slot_of_thread[threadIdx.x]], in[threadIdx.x]);
    __syncthreads();
    for (int i = threadIdx.x; i < kWordSlots; i += kWordThreads) hattn::ptx::st_global_b32(&out[i], hattn::ptx::ld_shared_b32(&buf[i]));
}

// `used` distinct slots out of `slots`, in random order: thread t stores to slot [t].
std::vector<int> random_slots(std::mt19937& rng, int slots, int used) {
    std::vector<int> s(slots);
    std::iota(s.begin(), s.end(), 0);
    std::shuffle(s.begin(), s.end(), rng);
    s.resize(used);
    return s;
}

// One CTA of `threads` runs kernel(in, slots, out) on uploaded copies; got receives out_elems
// elements of out (zeroed before the launch).
template <class T, class Kernel>
void run_scatter_kernel(Kernel kernel, int threads, const std::vector<T>& in, const std::vector<int>& slots,
                        size_t out_elems, std::vector<T>& got) {
    DeviceBuffer<T> d_in(in.size()), d_out(out_elems);
    DeviceBuffer<int> d_slots(slots.size());
    HATTN_CUDA_CHECK(d_in.status);
    HATTN_CUDA_CHECK(d_out.status);
    HATTN_CUDA_CHECK(d_slots.status);
    HATTN_CUDA_CHECK(cudaMemcpy(d_in.ptr, in.data(), d_in.bytes(), cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemcpy(d_slots.ptr, slots.data(), d_slots.bytes(), cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemset(d_out.ptr, 0, d_out.bytes()));
    kernel<<<1, threads>>>(d_in.ptr, d_slots.ptr, d_out.ptr);
    HATTN_CUDA_CHECK(cudaGetLastError());
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());
    got.resize(out_elems);
    HATTN_CUDA_CHECK(cudaMemcpy(got.data(), d_out.ptr, d_out.bytes(), cudaMemcpyDeviceToHost));
}

}  // namespace

TEST(PtxLdSt, SharedWordStoreLoadAndGlobalWordStore) {
    HATTN_REQUIRE_HOPPER();
    std::mt19937 rng(0x5b32);
    std::vector<uint32_t> in(kWordThreads);
    for (auto& x : in) {
        do {
            x = rng();
        } while (x == kVecPoison);
    }
    const std::vector<int> slots = random_slots(rng, kWordSlots, kWordThreads);
    std::vector<uint32_t> got;
    run_scatter_kernel(shared_word_kernel, kWordThreads, in, slots, kWordSlots, got);
    if (HasFatalFailure()) return;
    std::vector<uint32_t> want(kWordSlots, kVecPoison);
    for (int t = 0; t < kWordThreads; ++t) want[slots[t]] = in[t];
    EXPECT_EQ(got, want) << "a word was lost, moved or written where nobody stored";
}

TEST(PtxLdSt, LdmatrixX4FragmentLayout) {
    HATTN_REQUIRE_HOPPER();
    check_load(false, 0x1d01);
}

TEST(PtxLdSt, LdmatrixX4TransFragmentLayout) {
    HATTN_REQUIRE_HOPPER();
    check_load(true, 0x1d02);
}

TEST(PtxLdSt, StmatrixX4FragmentLayout) {
    HATTN_REQUIRE_HOPPER();
    check_store(false, 0x5d03);
}

TEST(PtxLdSt, StmatrixX4TransFragmentLayout) {
    HATTN_REQUIRE_HOPPER();
    check_store(true, 0x5d04);
}

TEST(PtxLdSt, LdmatrixStmatrixRoundTrip) {
    HATTN_REQUIRE_HOPPER();
    check_round_trip(false, 0x7d05);
}

TEST(PtxLdSt, LdmatrixStmatrixTransRoundTrip) {
    HATTN_REQUIRE_HOPPER();
    check_round_trip(true, 0x7d06);
}

TEST(PtxLdSt, SharedVectorStoreV4LoadV2RoundTrip) {
    HATTN_REQUIRE_HOPPER();
    // Random finite values plus signed zeros, subnormals and infinities: moves keep every bit.
    std::mt19937 rng(0x5a4e);
    std::vector<float> in(4 * kVecThreads);
    for (auto& x : in) {
        do {
            x = float_of(rng());
        } while (std::isnan(x));
    }
    const float specials[] = {0.0f, -0.0f, float_of(0x00000001u), float_of(0x807FFFFFu), INFINITY, -INFINITY, 1.0f};
    std::copy(std::begin(specials), std::end(specials), in.begin());
    const std::vector<int> slots = random_slots(rng, kVecSlots, kVecThreads);
    std::vector<float> got;
    run_scatter_kernel(shared_vector_kernel, kVecThreads, in, slots, kVecFloats, got);
    if (HasFatalFailure()) return;

    std::vector<uint32_t> want(kVecFloats, kVecPoison);
    for (int t = 0; t < kVecThreads; ++t) {
        for (int k = 0; k < 4; ++k) want[4 * slots[t] + k] = bits_of(in[4 * t + k]);
    }
    int bad = 0;
    for (int i = 0; i < kVecFloats; ++i) {
        if (bits_of(got[i]) != want[i] && ++bad <= 8) {
            ADD_FAILURE() << "float " << i << " (slot " << i / 4 << "): 0x" << std::hex << bits_of(got[i])
                          << ", want 0x" << want[i] << std::dec;
        }
    }
    EXPECT_EQ(bad, 0);
}
