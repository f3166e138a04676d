// hattn/test/host_fp8_fragment_test.cu -- CPU test of the FP8 forward's P fragment mapping
// (src/kernels/sm90/fragment_e4m3.cuh): the fp32 accumulator element each byte of the 8-bit A fragment
// takes, and the key order V^T must be written in for P V to sum the right products; and, with
// ldmatrix / stmatrix / prmt emulated from the PTX ISA, the in-kernel V transpose
// (sm90::transpose_v_tile's lane addresses) and Q's A fragments from shared memory
// (sm90::load_a_fragments_e4m3): the bytes they move, and one wavefront per matrix.
//
// The layouts, written out from the PTX ISA (9.7.15.5.1, register fragments of wgmma):
//   fp32 D of m64nN: thread (warp w, lane l), element i: row 16w + l/4 + 8 ((i/2) % 2),
//                    column 8 (i/4) + 2 (l%4) + i%2;
//   8-bit A of m64nNk32: register j, byte b: row 16w + l/4 + 8 (j%2), k = 16 (j/2) + 4 (l%4) + b.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "kernels/sm90/fragment_e4m3.cuh"
#include "kernels/sm90/vt_e4m3.cuh"

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

// ---- Warp-collective moves, emulated (PTX ISA 9.7.14.5.15-16: ldmatrix, stmatrix .m8n8.x4.b16) ----
// Each of the 4 matrices is 8 rows of 16 bytes whose addresses lanes 8m .. 8m + 7 give; lane l holds
// of matrix m the 16-bit pair at row l / 4, columns 2 (l % 4), +1 (bytes 4 (l % 4) .. +3), or with
// .trans the elements (row 2 (l % 4), column l / 4) and (row 2 (l % 4) + 1, column l / 4).
using Regs = uint32_t[kLanes][4];

uint32_t word_at(const std::vector<uint8_t>& mem, uint32_t at) {
    return mem[at] | mem[at + 1] << 8 | mem[at + 2] << 16 | uint32_t{mem[at + 3]} << 24;
}
uint16_t half_at(const std::vector<uint8_t>& mem, uint32_t at) { return static_cast<uint16_t>(mem[at] | mem[at + 1] << 8); }

void ldmatrix_x4(const std::vector<uint8_t>& mem, const uint32_t (&addr)[kLanes], bool trans, Regs& r) {
    for (int m = 0; m < 4; ++m)
        for (int l = 0; l < kLanes; ++l) {
            if (!trans) {
                r[l][m] = word_at(mem, addr[8 * m + l / 4] + 4 * (l % 4));
            } else {
                const uint32_t lo = half_at(mem, addr[8 * m + 2 * (l % 4)] + 2 * (l / 4));
                const uint32_t hi = half_at(mem, addr[8 * m + 2 * (l % 4) + 1] + 2 * (l / 4));
                r[l][m] = lo | hi << 16;
            }
        }
}
void stmatrix_x4(std::vector<uint8_t>& mem, const uint32_t (&addr)[kLanes], const Regs& r) {
    for (int m = 0; m < 4; ++m)
        for (int l = 0; l < kLanes; ++l)
            for (int b = 0; b < 4; ++b) mem[addr[8 * m + l / 4] + 4 * (l % 4) + b] = static_cast<uint8_t>(r[l][m] >> (8 * b));
}
uint32_t prmt(uint32_t a, uint32_t b, uint32_t selector) {
    const uint64_t src = a | uint64_t{b} << 32;
    uint32_t d = 0;
    for (int i = 0; i < 4; ++i) d |= static_cast<uint32_t>((src >> (8 * ((selector >> (4 * i)) & 7))) & 0xFF) << (8 * i);
    return d;
}
// A matrix's 8 row addresses hit 8 different 16-byte bank groups (one shared-memory wavefront).
void expect_conflict_free(const uint32_t (&addr)[kLanes], const char* what) {
    for (int m = 0; m < 4; ++m) {
        std::set<uint32_t> groups;
        for (int r = 0; r < 8; ++r) groups.insert((addr[8 * m + r] % 128) / 16);
        EXPECT_EQ(groups.size(), 8u) << what << " matrix " << m;
    }
}

// transpose_v_tile, emulated warp by warp from its lane addresses (sm90::transpose_lane): V^T's
// position p of dim e in key group g holds V's key 32 g + e4m3_k_to_key(p % 32), every byte of the
// tile written, every matrix conflict-free.
template <class VRowTile, class VtTile>
void expect_transpose_v_tile() {
    constexpr int kKeys = VRowTile::kRows, kDims = VRowTile::kCols, kWarpsUsed = 3;
    constexpr int kDimChunks = kDims / kTransposeChunkDims;
    std::mt19937 rng(kKeys * 1000 + kDims);
    std::vector<uint8_t> v(sizeof(VRowTile)), vt(sizeof(VtTile), 0);
    std::vector<bool> written(sizeof(VtTile), false);
    for (auto& x : v) x = static_cast<uint8_t>(rng());
    for (int warp = 0; warp < kWarpsUsed; ++warp)
        for (int u = warp; u < transpose_units<VRowTile>(); u += kWarpsUsed) {
            const int group = u / kDimChunks, chunk = u % kDimChunks;
            uint32_t load[kLanes], store[kLanes], first[kLanes];
            for (int l = 0; l < kLanes; ++l) {
                const TransposeLane me = transpose_lane<VRowTile, VtTile>(l);
                load[l] = transpose_load_offset<VRowTile>(me, group, chunk);
                store[l] = transpose_store_offset<VtTile>(me, group, chunk);
                first[l] = me.first_selector;
            }
            expect_conflict_free(load, "ldmatrix");
            expect_conflict_free(store, "stmatrix");
            Regs x, y;
            ldmatrix_x4(v, load, true, x);
            for (int l = 0; l < kLanes; ++l) {
                const uint32_t second = first[l] ^ kEvenBytes ^ kOddBytes;
                y[l][0] = prmt(x[l][0], x[l][1], first[l]);
                y[l][1] = prmt(x[l][0], x[l][1], second);
                y[l][2] = prmt(x[l][2], x[l][3], first[l]);
                y[l][3] = prmt(x[l][2], x[l][3], second);
            }
            stmatrix_x4(vt, store, y);
            for (int m = 0; m < 4; ++m)
                for (int r = 0; r < 8; ++r)
                    for (int b = 0; b < 16; ++b) written[store[8 * m + r] + b] = true;
        }
    for (int e = 0; e < kDims; ++e)
        for (int p = 0; p < kKeys; ++p) {
            const int key = p / kE4m3KeyGroup * kE4m3KeyGroup + e4m3_k_to_key(p % kE4m3KeyGroup);
            ASSERT_EQ(vt[VtTile::offset(e, p)], v[VRowTile::offset(key, e)]) << "dim " << e << " position " << p;
        }
    for (size_t i = 0; i < written.size(); ++i) ASSERT_TRUE(written[i]) << "V^T byte " << i << " never written";
}

TEST(Fp8InKernelTranspose, EveryHeadDimsTilesTransposeInTheKeyOrderWithoutBankConflicts) {
    // The FP8 forward's (V rows, V^T slot) pairs: d64 and d128 with 128-key blocks, d256 with 64.
    expect_transpose_v_tile<SwizzledTile<E4m3, 128, 64, 64>, SwizzledTile<E4m3, 64, 128>>();
    expect_transpose_v_tile<SwizzledTile<E4m3, 128, 128>, SwizzledTile<E4m3, 128, 128>>();
    expect_transpose_v_tile<SwizzledTile<E4m3, 64, 256>, SwizzledTile<E4m3, 256, 64, 64>>();
}

// load_a_fragments_e4m3, emulated: each lane's register j byte b of k-step kk is Q's row
// first_row + 16 w + l / 4 + 8 (j % 2), byte 32 kk + 16 (j / 2) + 4 (l % 4) + b (the A layout above).
template <class QTile>
void expect_a_fragments() {
    constexpr int kSteps = QTile::kCols / kK, kFirstRow = 64;
    std::mt19937 rng(QTile::kCols);
    std::vector<uint8_t> q(sizeof(QTile));
    for (auto& x : q) x = static_cast<uint8_t>(rng());
    for (int w = 0; w < kWarps; ++w)
        for (int kk = 0; kk < kSteps; ++kk) {
            uint32_t addr[kLanes];
            for (int l = 0; l < kLanes; ++l) {
                const RowByte at = a_fragment_ldmatrix_row(w, l);
                addr[l] = QTile::offset(kFirstRow + at.row, kK * kk + at.byte);
            }
            expect_conflict_free(addr, "ldmatrix of Q");
            Regs a;
            ldmatrix_x4(q, addr, false, a);
            for (int l = 0; l < kLanes; ++l)
                for (int j = 0; j < kRegs; ++j)
                    for (int b = 0; b < kBytes; ++b) {
                        const int row = kFirstRow + a_row(w, l, j), byte = kK * kk + e4m3_a_k(j, b, l);
                        ASSERT_EQ((a[l][j] >> (8 * b)) & 0xFF, q[QTile::offset(row, byte)])
                            << "warp " << w << " lane " << l << " k-step " << kk << " reg " << j << " byte " << b;
                    }
        }
}

TEST(Fp8Fragment, QFragmentsFromSharedMemoryAreTheALayout) {
    expect_a_fragments<SwizzledTile<E4m3, 128, 64, 64>>();
    expect_a_fragments<SwizzledTile<E4m3, 128, 128>>();
    expect_a_fragments<SwizzledTile<E4m3, 128, 256>>();
}

}  // namespace
