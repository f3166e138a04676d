// hattn/test/host_fp8_fragment_test.cu -- CPU test of the FP8 forward's P fragment mapping
// (src/kernels/sm90/fragment_e4m3.cuh): the fp32 accumulator element each byte of the 8-bit A fragment
// takes, and the key order V^T must be written in for P V to sum the right products.
//
// The layouts, written out from the PTX ISA (9.7.15.5.1, register fragments of wgmma):
//   fp32 D of m64nN: thread (warp w, lane l), element i: row 16w + l/4 + 8 ((i/2) % 2),
//                    column 8 (i/4) + 2 (l%4) + i%2;
//   8-bit A of m64nNk32: register j, byte b: row 16w + l/4 + 8 (j%2), k = 16 (j/2) + 4 (l%4) + b.
#include <gtest/gtest.h>

#include <set>

#include "kernels/sm90/fragment_e4m3.cuh"

namespace {

using namespace hattn::sm90;

constexpr int kWarps = 4, kLanes = 32, kRegs = 4, kBytes = 4, kK = 32;

int d_row(int warp, int lane, int i) { return 16 * warp + lane / 4 + 8 * acc_row_half(i); }
int a_row(int warp, int lane, int reg) { return 16 * warp + lane / 4 + 8 * e4m3_a_row_half(reg); }

TEST(Fp8Fragment, EachAByteTakesTheThreadsOwnAccumulatorOfTheSameRow) {
    for (int w = 0; w < kWarps; ++w)
        for (int l = 0; l < kLanes; ++l)
            for (int j = 0; j < kRegs; ++j)
                for (int b = 0; b < kBytes; ++b) {
                    const int i = e4m3_a_acc_index(j, b);
                    ASSERT_GE(i, 0);
                    ASSERT_LT(i, kK / 2);
                    EXPECT_EQ(d_row(w, l, i), a_row(w, l, j)) << "lane " << l << " reg " << j << " byte " << b;
                    // The key this k position stands for is the accumulator's column.
                    EXPECT_EQ(e4m3_k_to_key(e4m3_a_k(j, b, l)), acc_col(i, l)) << "lane " << l << " reg " << j << " byte " << b;
                }
}

TEST(Fp8Fragment, AccumulatorIndicesAndKeyOrderAreBijections) {
    std::set<int> idx, keys;
    for (int j = 0; j < kRegs; ++j)
        for (int b = 0; b < kBytes; ++b) idx.insert(e4m3_a_acc_index(j, b));
    EXPECT_EQ(idx.size(), size_t(kK / 2));
    for (int p = 0; p < kK; ++p) {
        const int key = e4m3_k_to_key(p);
        EXPECT_GE(key, 0);
        EXPECT_LT(key, kK);
        keys.insert(key);
    }
    EXPECT_EQ(keys.size(), size_t(kK));
}

// The product itself, emulated: A bytes placed as the kernel places them, B's k position p holding
// V's key e4m3_k_to_key(p), summed over p, equals sum over keys of P[row][key] V[key].
TEST(Fp8Fragment, PermutedProductEqualsTheKeyOrderProduct) {
    double p_mat[64][kK], v[kK];
    for (int r = 0; r < 64; ++r)
        for (int c = 0; c < kK; ++c) p_mat[r][c] = (r * 37 + c * 11) % 17 - 8;
    for (int c = 0; c < kK; ++c) v[c] = (c * 5) % 7 - 3;
    double a[64][kK] = {};  // A by (row, k position), filled from each thread's accumulator
    for (int w = 0; w < kWarps; ++w)
        for (int l = 0; l < kLanes; ++l)
            for (int j = 0; j < kRegs; ++j)
                for (int b = 0; b < kBytes; ++b) {
                    const int i = e4m3_a_acc_index(j, b);
                    a[a_row(w, l, j)][e4m3_a_k(j, b, l)] = p_mat[d_row(w, l, i)][acc_col(i, l)];
                }
    for (int r = 0; r < 64; ++r) {
        double want = 0, got = 0;
        for (int c = 0; c < kK; ++c) want += p_mat[r][c] * v[c];
        for (int p = 0; p < kK; ++p) got += a[r][p] * v[e4m3_k_to_key(p)];
        EXPECT_EQ(got, want) << "row " << r;
    }
}

}  // namespace

namespace {

// The 64-byte swizzle of the 8-bit tiles with 64-byte rows (e4m3 Q/K at head_dim 64, V^T with
// 64-key blocks): address bits 4-5 XOR bits 7-8 (TMA's CU_TENSOR_MAP_SWIZZLE_64B, wgmma's 64B
// mode), i.e. chunk ^= (row / 2) % 4; and the 128-byte one unchanged (chunk ^= row % 8).
template <class Tile>
void expect_swizzle_by_definition() {
    for (int row = 0; row < Tile::kRows; ++row)
        for (int col = 0; col < Tile::kCols; ++col) {
            const uint32_t linear = (col / Tile::kAtomCols) * Tile::kAtomBytes + row * Tile::kSpan + col % Tile::kAtomCols;
            const uint32_t bits = Tile::kSpan == 128 ? 0x70u : 0x30u;
            const uint32_t want = linear ^ (((linear >> 7) << 4) & bits);
            ASSERT_EQ(Tile::offset(row, col), want) << "row " << row << " col " << col;
        }
}

TEST(Fp8Tile, SixtyFourByteSwizzleMatchesTheAddressBitDefinition) {
    using Tile64 = SwizzledTile<E4m3, 128, 64, 64>;
    static_assert(Tile64::kAtoms == 1 && Tile64::kKStepsPerAtom == 2 && Tile64::kBytes == 128 * 64, "one 64-byte atom");
    expect_swizzle_by_definition<Tile64>();
    using Tile64Wide = SwizzledTile<E4m3, 64, 256, 64>;  // four atoms
    expect_swizzle_by_definition<Tile64Wide>();
    using Tile128 = SwizzledTile<E4m3, 64, 256>;
    static_assert(Tile128::kSpan == 128 && Tile128::kAtoms == 2, "the default span");
    expect_swizzle_by_definition<Tile128>();
}

}  // namespace
