// hattn/test/ptx_tma_test.cu -- TMA tensor loads and stores (ptx/tma.cuh) with tensor maps from
// hattn::sm90::encode_tensor_map, 128B swizzle, bf16, inner box of 64 elements (128 bytes).
//
//   * 2D and 3D loads: every element of the box lands at the offset the swizzle formula of
//     ptx_test_util.cuh predicts (the landing zone is poisoned first, and the formula is a
//     bijection on the box, so every byte is checked);
//   * boxes that reach past the tensor, on either side, are zero-filled where out of bounds;
//   * a 2D store round trip global -> smem (TMA) -> smem (threads) -> global (TMA) reproduces the
//     input and clips at the tensor edge (a guard band after the output stays poisoned).
#include "gpu_test_util.h"
#include "ptx_test_util.cuh"

#include "kernels/sm90/tensor_map.h"
#include "ptx/hattn_ptx.cuh"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

using hattn::test::DeviceBuffer;
using hattn::test::swizzled_2d_spec;
using hattn::test::swizzled_tile_offset;

constexpr uint32_t kElemBytes = 2;                        // bf16
constexpr uint32_t kSwizzleSpan = 128;                    // CU_TENSOR_MAP_SWIZZLE_128B
constexpr uint32_t kBoxCols = kSwizzleSpan / kElemBytes;  // 64: the widest box a 128B swizzle allows
constexpr uint32_t kBoxRows = 64;
constexpr uint32_t kBoxBytes = kBoxCols * kBoxRows * kElemBytes;
constexpr uint32_t kPoisonWord = 0xDEADBEEFu;
constexpr uint16_t kPoisonElem = 0xFFFFu;  // a bf16 NaN: never produced by the random data
constexpr int kThreads = 128;

// Loads one box at (c0, c1, c2) (c2 ignored for rank 2) and dumps the raw landing zone.
__global__ void __launch_bounds__(kThreads) tma_load_box_kernel(const __grid_constant__ CUtensorMap tmap, int rank,
                                                                int c0, int c1, int c2, uint32_t* dump) {
    extern __shared__ uint8_t smem_raw[];
    uint32_t* tile = reinterpret_cast<uint32_t*>(hattn::test::align_smem_for_swizzle(smem_raw));
    __shared__ uint64_t full;

    for (uint32_t i = threadIdx.x; i < kBoxBytes / 4; i += kThreads) tile[i] = kPoisonWord;
    if (threadIdx.x == 0) {
        hattn::ptx::prefetch_tensormap(&tmap);
        hattn::ptx::mbarrier_init(&full, 1);
        hattn::ptx::fence_mbarrier_init();
    }
    // NOTE: the poison is written through the generic proxy and the TMA writes through the async
    //       proxy; without this fence the poison could land after the data.
    hattn::ptx::fence_proxy_async_shared_cta();
    __syncthreads();

    if (threadIdx.x == 0) {
        // The whole box counts towards the transaction bytes, out-of-bounds zero fill included.
        hattn::ptx::mbarrier_arrive_expect_tx(&full, kBoxBytes);
        if (rank == 2) {
            hattn::ptx::tma_load_2d(tile, &tmap, &full, c0, c1);
        } else {
            hattn::ptx::tma_load_3d(tile, &tmap, &full, c0, c1, c2);
        }
    }
    hattn::ptx::mbarrier_wait(&full, 0);
    for (uint32_t i = threadIdx.x; i < kBoxBytes / 4; i += kThreads) dump[i] = tile[i];
}

// One CTA per box: TMA load, threads copy the (swizzled) tile to a second buffer, TMA store.
__global__ void __launch_bounds__(kThreads) tma_round_trip_kernel(const __grid_constant__ CUtensorMap in_map,
                                                                  const __grid_constant__ CUtensorMap out_map) {
    extern __shared__ uint8_t smem_raw[];
    uint8_t* landing = hattn::test::align_smem_for_swizzle(smem_raw);
    uint8_t* staging = landing + kBoxBytes;  // kBoxBytes is a multiple of 1024
    __shared__ uint64_t full;
    const int c0 = blockIdx.x * kBoxCols, c1 = blockIdx.y * kBoxRows;

    if (threadIdx.x == 0) {
        hattn::ptx::prefetch_tensormap(&in_map);
        hattn::ptx::prefetch_tensormap(&out_map);
        hattn::ptx::mbarrier_init(&full, 1);
        hattn::ptx::fence_mbarrier_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        hattn::ptx::mbarrier_arrive_expect_tx(&full, kBoxBytes);
        hattn::ptx::tma_load_2d(landing, &in_map, &full, c0, c1);
    }
    hattn::ptx::mbarrier_wait(&full, 0);

    const uint4* src = reinterpret_cast<const uint4*>(landing);
    uint4* dst = reinterpret_cast<uint4*>(staging);
    for (uint32_t i = threadIdx.x; i < kBoxBytes / sizeof(uint4); i += kThreads) dst[i] = src[i];
    // NOTE: staging was written by threads (generic proxy) and is read by the TMA store (async
    //       proxy): every writer fences, then the barrier hands the tile to the issuing thread.
    hattn::ptx::fence_proxy_async_shared_cta();
    __syncthreads();
    if (threadIdx.x == 0) {
        hattn::ptx::tma_store_2d(&out_map, staging, c0, c1);
        hattn::ptx::bulk_commit_group();
        hattn::ptx::bulk_wait_group_read<0>();  // the smem source may be reused from here on
        hattn::ptx::bulk_wait_group<0>();       // the global writes are complete
    }
}

// A bf16 tensor of random non-zero values (|x| in [0.25, 2]), so zero fill is distinguishable.
std::vector<uint16_t> random_nonzero_bf16(size_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> mag(0.25f, 2.0f);
    std::bernoulli_distribution negative(0.5);
    std::vector<uint16_t> v(n);
    for (auto& x : v) x = hattn::test::bf16_bits_from_float(negative(rng) ? -mag(rng) : mag(rng));
    return v;
}

// Runs tma_load_box_kernel and compares the landing zone element by element with `expect`,
// which maps (box row, box col) to the expected bits (0 for out of bounds).
template <class Expect>
void check_box_load(const CUtensorMap& map, int rank, int c0, int c1, int c2, Expect expect) {
    DeviceBuffer<uint32_t> dump(kBoxBytes / 4);
    HATTN_CUDA_CHECK(dump.status);
    HATTN_CUDA_CHECK(cudaMemset(dump.ptr, 0xAB, dump.bytes()));
    const size_t smem = kBoxBytes + hattn::test::kSmemTileAlign;
    tma_load_box_kernel<<<1, kThreads, smem>>>(map, rank, c0, c1, c2, dump.ptr);
    HATTN_CUDA_CHECK(cudaGetLastError());
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());

    std::vector<uint16_t> got(kBoxBytes / kElemBytes);
    HATTN_CUDA_CHECK(cudaMemcpy(got.data(), dump.ptr, kBoxBytes, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (uint32_t r = 0; r < kBoxRows; ++r) {
        for (uint32_t c = 0; c < kBoxCols; ++c) {
            const uint32_t at = swizzled_tile_offset(r, c, kBoxRows, kElemBytes, kSwizzleSpan) / kElemBytes;
            const uint16_t want = expect(r, c);
            if (got[at] != want && ++bad <= 8) {
                ADD_FAILURE() << "box (" << c0 << ", " << c1 << ", " << c2 << ") row " << r << " col " << c
                              << ": smem element " << at << " holds 0x" << std::hex << got[at] << ", want 0x"
                              << want << std::dec;
            }
        }
    }
    EXPECT_EQ(bad, 0) << "elements misplaced or not zero-filled";
}

}  // namespace

// 2D: a [150][200] bf16 tensor (rows of 400 bytes), box 64 x 64.
TEST(PtxTma, Load2dSwizzle128BInBoundsAndOutOfBounds) {
    HATTN_REQUIRE_HOPPER();
    constexpr int kRows = 150, kCols = 200;
    const std::vector<uint16_t> host = random_nonzero_bf16(kRows * kCols, 0x2d01);
    DeviceBuffer<uint16_t> tensor(host.size());
    HATTN_CUDA_CHECK(tensor.status);
    HATTN_CUDA_CHECK(cudaMemcpy(tensor.ptr, host.data(), tensor.bytes(), cudaMemcpyHostToDevice));

    const hattn::sm90::TensorMapSpec spec =
        swizzled_2d_spec(tensor.ptr, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, kCols, kRows, kBoxCols, kBoxRows);
    CUtensorMap map;
    std::string error;
    ASSERT_TRUE(hattn::sm90::encode_tensor_map(&map, spec, &error)) << error;

    // inside; past the right and bottom edges (8 columns, 22 rows valid); before the left and top
    const int corners[][2] = {{64, 32}, {192, 128}, {-8, -5}, {136, 0}};
    for (const auto& corner : corners) {
        const int c0 = corner[0], c1 = corner[1];
        check_box_load(map, 2, c0, c1, 0, [&](uint32_t r, uint32_t c) -> uint16_t {
            const int gr = c1 + static_cast<int>(r), gc = c0 + static_cast<int>(c);
            const bool inside = gr >= 0 && gr < kRows && gc >= 0 && gc < kCols;
            return inside ? host[gr * kCols + gc] : uint16_t{0};
        });
    }
}

// 3D: the attention layout [seq][heads][head_dim] seen as dims {head_dim, seq, heads}, with a
// head_dim of 128 loaded as two 64-column boxes; boxes of one head and of two heads.
TEST(PtxTma, Load3dSwizzle128BHeadsAndOutOfBounds) {
    HATTN_REQUIRE_HOPPER();
    constexpr int kHeadDim = 128, kSeq = 100, kHeads = 3;
    const std::vector<uint16_t> host = random_nonzero_bf16(kSeq * kHeads * kHeadDim, 0x3d02);
    DeviceBuffer<uint16_t> tensor(host.size());
    HATTN_CUDA_CHECK(tensor.status);
    HATTN_CUDA_CHECK(cudaMemcpy(tensor.ptr, host.data(), tensor.bytes(), cudaMemcpyHostToDevice));
    auto at = [&](int d, int s, int h) { return host[(s * kHeads + h) * kHeadDim + d]; };

    struct Case {
        uint32_t box_seq, box_heads;  // box_seq * box_heads = kBoxRows smem rows
        int d0, s0, h0;
    };
    const Case cases[] = {
        {64, 1, 0, 0, 1},    // fully inside
        {64, 1, 64, 48, 2},  // second column block; sequence rows 100..111 out of bounds
        {32, 2, 0, 80, 1},   // two heads stacked in smem (row = head * 32 + seq); rows 100..111 OOB
        {32, 2, 64, 90, 2},  // head 3 does not exist: its 32 rows are all zero-filled
    };
    for (const Case& k : cases) {
        hattn::sm90::TensorMapSpec spec;
        spec.base = tensor.ptr;
        spec.dtype = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
        spec.rank = 3;
        spec.dims[0] = kHeadDim;
        spec.dims[1] = kSeq;
        spec.dims[2] = kHeads;
        spec.strides_bytes[0] = kHeads * kHeadDim * kElemBytes;  // next sequence position
        spec.strides_bytes[1] = kHeadDim * kElemBytes;           // next head
        spec.box[0] = kBoxCols;
        spec.box[1] = k.box_seq;
        spec.box[2] = k.box_heads;
        spec.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
        CUtensorMap map;
        std::string error;
        ASSERT_TRUE(hattn::sm90::encode_tensor_map(&map, spec, &error)) << error;
        check_box_load(map, 3, k.d0, k.s0, k.h0, [&](uint32_t r, uint32_t c) -> uint16_t {
            const int h = k.h0 + static_cast<int>(r / k.box_seq), s = k.s0 + static_cast<int>(r % k.box_seq);
            const int d = k.d0 + static_cast<int>(c);
            const bool inside = s < kSeq && h < kHeads && d < kHeadDim;
            return inside ? at(d, s, h) : uint16_t{0};
        });
    }
}

// Round trip over a [130][192] tensor: 3 x 3 boxes, the last box row mostly past the edge.
TEST(PtxTma, Store2dRoundTripClipsAtEdge) {
    HATTN_REQUIRE_HOPPER();
    constexpr int kRows = 130, kCols = 192, kGuardRows = 16;
    const std::vector<uint16_t> host = random_nonzero_bf16(kRows * kCols, 0x57e3);
    DeviceBuffer<uint16_t> in(host.size()), out(static_cast<size_t>(kRows + kGuardRows) * kCols);
    HATTN_CUDA_CHECK(in.status);
    HATTN_CUDA_CHECK(out.status);
    HATTN_CUDA_CHECK(cudaMemcpy(in.ptr, host.data(), in.bytes(), cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemset(out.ptr, 0xFF, out.bytes()));  // kPoisonElem everywhere

    // kRows only: the guard band lies outside the map.
    auto spec_for = [&](const void* base) {
        return swizzled_2d_spec(base, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, kCols, kRows, kBoxCols, kBoxRows);
    };
    CUtensorMap in_map, out_map;
    std::string error;
    ASSERT_TRUE(hattn::sm90::encode_tensor_map(&in_map, spec_for(in.ptr), &error)) << error;
    ASSERT_TRUE(hattn::sm90::encode_tensor_map(&out_map, spec_for(out.ptr), &error)) << error;

    const dim3 grid(kCols / kBoxCols, (kRows + kBoxRows - 1) / kBoxRows);
    const size_t smem = 2 * kBoxBytes + hattn::test::kSmemTileAlign;
    tma_round_trip_kernel<<<grid, kThreads, smem>>>(in_map, out_map);
    HATTN_CUDA_CHECK(cudaGetLastError());
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());

    std::vector<uint16_t> got(out.count);
    HATTN_CUDA_CHECK(cudaMemcpy(got.data(), out.ptr, out.bytes(), cudaMemcpyDeviceToHost));
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const bool in_tensor = i < host.size();
        const uint16_t want = in_tensor ? host[i] : kPoisonElem;
        if (got[i] != want && ++bad <= 8) {
            ADD_FAILURE() << (in_tensor ? "element " : "guard element ") << i << " (row " << i / kCols << ", col "
                          << i % kCols << "): 0x" << std::hex << got[i] << ", want 0x" << want << std::dec;
        }
    }
    EXPECT_EQ(bad, 0);
}
