// hattn/test/ptx_atomic_test.cu -- reductions and flags in global memory (ptx/atomic.cuh).
//
//   * red_global_add_v2_f32 / red_global_add_v4_f32 from many threads of many CTAs: into one hot
//     16-byte vector (v4) and one 8-byte pair that is not 16-byte aligned (v2), into one vector per
//     thread index shared by every CTA, and into one vector / pair per thread. The addends are
//     small integers over powers of two, so every partial sum is exact in fp32 and the result is
//     the same in any order: the sums are compared bit for bit, and the neighbours of every target
//     must keep their values.
//   * red_release_gpu_global_add_s32 + spin_until_equal_acquire_gpu + fence_acq_rel_gpu as a chain
//     of CTAs, the deterministic backward's dQ ordering in miniature: CTA j waits until the
//     counter reads j, appends its id to an order log through a plain-stored cursor, checks the row every
//     thread of CTA j - 1 wrote with plain stores, writes its own row, fences, and releases j + 1.
//   * st_release_gpu_global_s32 + ld_global_v2_f32 / ld_global_f32: one CTA's plain stores, read by
//     another after it acquires the released flag (the split tail's hand-over).
#include "gpu_test_util.h"
#include "ptx_test_util.cuh"

#include "ptx/hattn_ptx.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

using hattn::test::DeviceBuffer;

// ---- red.global.add.v2/v4.f32 -----------------------------------------------------------------

constexpr int kRedThreads = 256;
constexpr int kRedBlocks = 64;
constexpr int kRedTotalThreads = kRedThreads * kRedBlocks;
constexpr int kRedRepeats = 4;
// hot[0..3]: the v4 target of every thread; hot[4..5] untouched; hot[6..7]: the v2 target of
// every thread (8-byte aligned, not 16); hot[8..11] untouched.
constexpr int kHotV4 = 0;
constexpr int kHotV2 = 6;
constexpr int kHotFloats = 12;
// Addends are (integer in [-7, 9]) / 2^(k % 4): every partial sum is a multiple of 1/8 and, with
// the bound checked on the host, below 2^21 in magnitude, so it is exact in fp32. The range is not
// symmetric about zero: a symmetric one makes the hot sums exactly 0, which would not show lost
// additions.
constexpr uint32_t kAddendRange = 17;
constexpr int kAddendOffset = 7;

__host__ __device__ constexpr float addend(uint32_t thread, uint32_t repeat, uint32_t component) {
    const int v = static_cast<int>((thread * 131u + repeat * 31u + component * 7u) % kAddendRange) - kAddendOffset;
    return static_cast<float>(v) / static_cast<float>(1u << (component % 4u));
}

// per_column: 4 floats per thread index, shared by all CTAs. per_thread_v4 / per_thread_v2: 4 / 2
// floats per thread of the grid, preloaded with known values by the host.
__global__ void __launch_bounds__(kRedThreads) red_add_kernel(float* hot, float* per_column, float* per_thread_v4,
                                                              float* per_thread_v2) {
    const uint32_t g = blockIdx.x * blockDim.x + threadIdx.x;
    for (uint32_t r = 0; r < kRedRepeats; ++r) {
        hattn::ptx::red_global_add_v4_f32(hot + kHotV4, addend(g, r, 0), addend(g, r, 1), addend(g, r, 2),
                                          addend(g, r, 3));
        hattn::ptx::red_global_add_v2_f32(hot + kHotV2, addend(g, r, 4), addend(g, r, 5));
        hattn::ptx::red_global_add_v4_f32(per_column + 4 * threadIdx.x, addend(g, r, 8), addend(g, r, 9),
                                          addend(g, r, 10), addend(g, r, 11));
        hattn::ptx::red_global_add_v2_f32(per_thread_v2 + 2 * g, addend(g, r, 12), addend(g, r, 13));
    }
    hattn::ptx::red_global_add_v4_f32(per_thread_v4 + 4 * g, addend(g, 0, 16), addend(g, 0, 17), addend(g, 0, 18),
                                      addend(g, 0, 19));
}

// ---- the release / acquire chain ---------------------------------------------------------------

constexpr int kChainThreads = 128;
constexpr int kMaxChainBlocks = 1024;
// The chain must trap, not hang, if the ordering is broken. Its legitimate length is a few
// microseconds per CTA (far more under compute-sanitizer); 10 s is orders of magnitude above.
constexpr uint64_t kChainTimeoutNs = 10'000'000'000ull;

__host__ __device__ constexpr int32_t row_value(int block, int thread) { return block * 1000 + thread + 1; }

// counter and cursor start at 0; order and rows are poisoned by the host. stale[j] counts the
// entries of row j - 1 that CTA j saw without their final value (0 when the ordering holds).
__global__ void __launch_bounds__(kChainThreads) chain_kernel(int32_t* counter, int32_t* cursor, int32_t* order,
                                                              int32_t* rows, int32_t* stale) {
    const int j = blockIdx.x;
    const int t = threadIdx.x;
    if (t == 0) {
        hattn::ptx::spin_until_equal_acquire_gpu(counter, j, kChainTimeoutNs);
        // Everything CTA j - 1 wrote before its release is visible to this thread now: the cursor
        // it advanced and the row its 128 threads wrote with plain stores.
        const int32_t slot = *cursor;
        order[slot] = j;
        *cursor = slot + 1;
        int32_t bad = 0;
        if (j > 0) {
            for (int i = 0; i < kChainThreads; ++i) bad += rows[(j - 1) * kChainThreads + i] != row_value(j - 1, i);
        }
        stale[j] = bad;
    }
    __syncthreads();
    rows[j * kChainThreads + t] = row_value(j, t);
    // Every writer orders its stores before the barrier; the barrier then puts them all before
    // thread 0's release (the backward's deterministic dQ: fence, consumers.sync, red.release).
    hattn::ptx::fence_acq_rel_gpu();
    __syncthreads();
    if (t == 0) hattn::ptx::red_release_gpu_global_add_s32(counter, 1);
}

uint32_t bits_of(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    return u;
}

// Compares bit for bit (the sums are exact); reports the first few differences.
void expect_same_floats(const char* what, const std::vector<float>& got, const std::vector<double>& want) {
    ASSERT_EQ(got.size(), want.size());
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (bits_of(got[i]) != bits_of(static_cast<float>(want[i])) && ++bad <= 8) {
            ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
        }
    }
    EXPECT_EQ(bad, 0) << what;
}

// The split tail's hand-over in miniature (ptx/global.cuh's coherent loads, st.release): CTA 0
// stores a float pair and a float per thread with plain stores, fences, meets at a barrier and
// releases a flag with st_release_gpu_global_s32; every thread of CTA 1 acquires the flag and reads
// them back with ld_global_v2_f32 / ld_global_f32.
constexpr int kHandOverThreads = 128;
__global__ void __launch_bounds__(kHandOverThreads) hand_over_kernel(float* pairs, float* singles, int32_t* flag,
                                                                     float* got_pairs, float* got_singles) {
    const int t = static_cast<int>(threadIdx.x);
    if (blockIdx.x == 0) {
        pairs[2 * t] = static_cast<float>(t);
        pairs[2 * t + 1] = static_cast<float>(t) + 0.5f;
        singles[t] = 3.f * static_cast<float>(t);
        hattn::ptx::fence_acq_rel_gpu();
        __syncthreads();
        if (t == 0) hattn::ptx::st_release_gpu_global_s32(flag, 1);
    } else {
        hattn::ptx::spin_until_equal_acquire_gpu(flag, 1, kChainTimeoutNs);
        const float2 pair = hattn::ptx::ld_global_v2_f32(pairs + 2 * t);
        got_pairs[2 * t] = pair.x;
        got_pairs[2 * t + 1] = pair.y;
        got_singles[t] = hattn::ptx::ld_global_f32(singles + t);
    }
}

}  // namespace

TEST(PtxAtomic, RedGlobalAddV2V4ExactSums) {
    HATTN_REQUIRE_HOPPER();
    // Host model, in float64, and the exactness bound: the sum of |addends| into any one float
    // bounds every partial sum, which must stay below 2^21 (multiples of 1/8 in a 24-bit significand).
    std::vector<double> hot(kHotFloats, 0.0), per_column(4 * kRedThreads, 0.0);
    std::vector<double> per_thread_v4(4 * kRedTotalThreads), per_thread_v2(2 * kRedTotalThreads);
    for (size_t i = 0; i < per_thread_v4.size(); ++i) per_thread_v4[i] = 0.5 * static_cast<double>(i);
    // (i + 1: no -0.0 start, the sums are compared bit for bit)
    for (size_t i = 0; i < per_thread_v2.size(); ++i) per_thread_v2[i] = -0.25 * static_cast<double>(i + 1);
    const std::vector<float> per_thread_v4_init(per_thread_v4.begin(), per_thread_v4.end());
    const std::vector<float> per_thread_v2_init(per_thread_v2.begin(), per_thread_v2.end());
    double hot_abs = 0.0;
    for (uint32_t g = 0; g < kRedTotalThreads; ++g) {
        for (uint32_t r = 0; r < kRedRepeats; ++r) {
            for (uint32_t k = 0; k < 4; ++k) {
                hot[kHotV4 + k] += addend(g, r, k);
                hot_abs += std::fabs(addend(g, r, k));
                per_column[4 * (g % kRedThreads) + k] += addend(g, r, 8 + k);
            }
            for (uint32_t k = 0; k < 2; ++k) {
                hot[kHotV2 + k] += addend(g, r, 4 + k);
                per_thread_v2[2 * g + k] += addend(g, r, 12 + k);
            }
        }
        for (uint32_t k = 0; k < 4; ++k) per_thread_v4[4 * g + k] += addend(g, 0, 16 + k);
    }
    ASSERT_LT(hot_abs, std::ldexp(1.0, 21)) << "the addends no longer sum exactly in fp32";
    ASSERT_NE(hot[kHotV4], 0.0) << "a sum of zero would not show lost additions";

    DeviceBuffer<float> d_hot(kHotFloats), d_per_column(per_column.size());
    DeviceBuffer<float> d_per_thread_v4(per_thread_v4.size()), d_per_thread_v2(per_thread_v2.size());
    HATTN_CUDA_CHECK(d_hot.status);
    HATTN_CUDA_CHECK(d_per_column.status);
    HATTN_CUDA_CHECK(d_per_thread_v4.status);
    HATTN_CUDA_CHECK(d_per_thread_v2.status);
    HATTN_CUDA_CHECK(cudaMemset(d_hot.ptr, 0, d_hot.bytes()));
    HATTN_CUDA_CHECK(cudaMemset(d_per_column.ptr, 0, d_per_column.bytes()));
    HATTN_CUDA_CHECK(cudaMemcpy(d_per_thread_v4.ptr, per_thread_v4_init.data(), d_per_thread_v4.bytes(),
                                cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemcpy(d_per_thread_v2.ptr, per_thread_v2_init.data(), d_per_thread_v2.bytes(),
                                cudaMemcpyHostToDevice));

    red_add_kernel<<<kRedBlocks, kRedThreads>>>(d_hot.ptr, d_per_column.ptr, d_per_thread_v4.ptr, d_per_thread_v2.ptr);
    HATTN_CUDA_CHECK(cudaGetLastError());
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());

    std::vector<float> got_hot(kHotFloats), got_per_column(per_column.size());
    std::vector<float> got_per_thread_v4(per_thread_v4.size()), got_per_thread_v2(per_thread_v2.size());
    HATTN_CUDA_CHECK(cudaMemcpy(got_hot.data(), d_hot.ptr, d_hot.bytes(), cudaMemcpyDeviceToHost));
    HATTN_CUDA_CHECK(cudaMemcpy(got_per_column.data(), d_per_column.ptr, d_per_column.bytes(), cudaMemcpyDeviceToHost));
    HATTN_CUDA_CHECK(
        cudaMemcpy(got_per_thread_v4.data(), d_per_thread_v4.ptr, d_per_thread_v4.bytes(), cudaMemcpyDeviceToHost));
    HATTN_CUDA_CHECK(
        cudaMemcpy(got_per_thread_v2.data(), d_per_thread_v2.ptr, d_per_thread_v2.bytes(), cudaMemcpyDeviceToHost));

    // hot[4..5] and hot[8..11] lie beside the targets and must still be 0.
    expect_same_floats("hot (v4 at 0, v2 at 6, all threads)", got_hot, hot);
    expect_same_floats("per thread index (v4, all CTAs)", got_per_column, per_column);
    expect_same_floats("per thread (v4, once)", got_per_thread_v4, per_thread_v4);
    expect_same_floats("per thread (v2, repeated)", got_per_thread_v2, per_thread_v2);
}

TEST(PtxAtomic, ReleasedStoresAreSeenByAcquiringLoads) {
    HATTN_REQUIRE_HOPPER();
    DeviceBuffer<float> pairs(2 * kHandOverThreads), singles(kHandOverThreads), got_pairs(2 * kHandOverThreads),
        got_singles(kHandOverThreads);
    DeviceBuffer<int32_t> flag(1);
    HATTN_CUDA_CHECK(pairs.status);
    HATTN_CUDA_CHECK(singles.status);
    HATTN_CUDA_CHECK(got_pairs.status);
    HATTN_CUDA_CHECK(got_singles.status);
    HATTN_CUDA_CHECK(flag.status);
    HATTN_CUDA_CHECK(cudaMemset(pairs.ptr, 0xFF, pairs.bytes()));  // NaN until written
    HATTN_CUDA_CHECK(cudaMemset(singles.ptr, 0xFF, singles.bytes()));
    HATTN_CUDA_CHECK(cudaMemset(flag.ptr, 0, flag.bytes()));
    hand_over_kernel<<<2, kHandOverThreads>>>(pairs.ptr, singles.ptr, flag.ptr, got_pairs.ptr, got_singles.ptr);
    HATTN_CUDA_CHECK(cudaGetLastError());
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> p(2 * kHandOverThreads), s(kHandOverThreads);
    HATTN_CUDA_CHECK(cudaMemcpy(p.data(), got_pairs.ptr, got_pairs.bytes(), cudaMemcpyDeviceToHost));
    HATTN_CUDA_CHECK(cudaMemcpy(s.data(), got_singles.ptr, got_singles.bytes(), cudaMemcpyDeviceToHost));
    for (int t = 0; t < kHandOverThreads; ++t) {
        EXPECT_EQ(p[2 * t], static_cast<float>(t)) << "thread " << t;
        EXPECT_EQ(p[2 * t + 1], static_cast<float>(t) + 0.5f) << "thread " << t;
        EXPECT_EQ(s[t], 3.f * static_cast<float>(t)) << "thread " << t;
    }
}

// Defined last: if the chain's ordering is broken the wait traps, which leaves this process's CUDA
// context unusable (ctest runs every test in its own process; a whole-binary run reports the
// later tests as failed too, never as a hang).
TEST(PtxAtomic, ReleaseAcquireChainOrdersCtas) {
    HATTN_REQUIRE_HOPPER();
    // Every CTA must be resident at once (CTA j spins until j - 1 has run): at most one CTA per SM.
    int device = 0, sms = 0, per_sm = 0;
    HATTN_CUDA_CHECK(cudaGetDevice(&device));
    HATTN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    HATTN_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, chain_kernel, kChainThreads, 0));
    ASSERT_GE(per_sm, 1);
    const int blocks = std::min(sms, kMaxChainBlocks);
    ASSERT_GE(blocks, 2) << "a chain needs two CTAs";

    DeviceBuffer<int32_t> counter(1), cursor(1), order(blocks), rows(static_cast<size_t>(blocks) * kChainThreads),
        stale(blocks);
    HATTN_CUDA_CHECK(counter.status);
    HATTN_CUDA_CHECK(cursor.status);
    HATTN_CUDA_CHECK(order.status);
    HATTN_CUDA_CHECK(rows.status);
    HATTN_CUDA_CHECK(stale.status);
    HATTN_CUDA_CHECK(cudaMemset(counter.ptr, 0, counter.bytes()));
    HATTN_CUDA_CHECK(cudaMemset(cursor.ptr, 0, cursor.bytes()));
    HATTN_CUDA_CHECK(cudaMemset(order.ptr, 0xFF, order.bytes()));  // -1: no entry
    HATTN_CUDA_CHECK(cudaMemset(rows.ptr, 0xFF, rows.bytes()));
    HATTN_CUDA_CHECK(cudaMemset(stale.ptr, 0xFF, stale.bytes()));

    chain_kernel<<<blocks, kChainThreads>>>(counter.ptr, cursor.ptr, order.ptr, rows.ptr, stale.ptr);
    HATTN_CUDA_CHECK(cudaGetLastError());
    // A trap (a wait past kChainTimeoutNs) fails here with cudaErrorLaunchFailure.
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());

    int32_t got_counter = -1, got_cursor = -1;
    std::vector<int32_t> got_order(blocks), got_rows(rows.count), got_stale(blocks);
    HATTN_CUDA_CHECK(cudaMemcpy(&got_counter, counter.ptr, sizeof(int32_t), cudaMemcpyDeviceToHost));
    HATTN_CUDA_CHECK(cudaMemcpy(&got_cursor, cursor.ptr, sizeof(int32_t), cudaMemcpyDeviceToHost));
    HATTN_CUDA_CHECK(cudaMemcpy(got_order.data(), order.ptr, order.bytes(), cudaMemcpyDeviceToHost));
    HATTN_CUDA_CHECK(cudaMemcpy(got_rows.data(), rows.ptr, rows.bytes(), cudaMemcpyDeviceToHost));
    HATTN_CUDA_CHECK(cudaMemcpy(got_stale.data(), stale.ptr, stale.bytes(), cudaMemcpyDeviceToHost));

    EXPECT_EQ(got_counter, blocks) << "one release increment per CTA";
    EXPECT_EQ(got_cursor, blocks) << "a lost cursor update: a CTA read the cursor before its predecessor's store";
    int bad = 0;
    for (int j = 0; j < blocks; ++j) {
        if (got_order[j] != j && ++bad <= 8) ADD_FAILURE() << "order[" << j << "] = " << got_order[j] << ", want " << j;
        if (got_stale[j] != 0 && ++bad <= 8) {
            ADD_FAILURE() << "CTA " << j << " saw " << got_stale[j] << " of CTA " << j - 1
                          << "'s row entries without their value (-1: it never checked)";
        }
        for (int t = 0; t < kChainThreads; ++t) {
            const int32_t v = got_rows[static_cast<size_t>(j) * kChainThreads + t];
            if (v != row_value(j, t) && ++bad <= 8) ADD_FAILURE() << "row " << j << " entry " << t << " = " << v;
        }
    }
    EXPECT_EQ(bad, 0);
}
