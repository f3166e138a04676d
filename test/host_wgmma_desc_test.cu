// hattn/test/host_wgmma_desc_test.cu -- the shared-memory matrix descriptor encoder of
// ptx/wgmma.cuh (make_smem_desc*, __host__ __device__ constexpr) checked on the CPU against
// values worked out by hand. A .cu file only because the header carries device code; every test
// here runs on the host and needs no GPU.
//
// Descriptor (PTX ISA 9.7.15.5.1.2.2 "Matrix Descriptor Format"), fields in 16-byte units:
//   bits  0-13  start address >> 4       bits 32-45  stride byte offset (SBO) >> 4
//   bits 16-29  leading byte offset >> 4 bits 62-63  swizzle: 1 = 128B, 2 = 64B, 3 = 32B
//   (bits 49-51, the base offset, stay 0: every tile starts on its pattern's boundary)
#include "ptx/wgmma.cuh"

#include <gtest/gtest.h>

#include <cstdint>

namespace {

using hattn::ptx::make_smem_desc;
using hattn::ptx::make_smem_desc_k_major;
using hattn::ptx::make_smem_desc_mn_major;
using hattn::ptx::smem_desc_advance;
using hattn::ptx::Swizzle;
using hattn::ptx::swizzle_span_bytes;

constexpr uint64_t kStartMask = 0x3FFFull;              // bits 0-13
constexpr uint64_t kLboMask = 0x3FFFull << 16;          // bits 16-29
constexpr uint64_t kSboMask = 0x3FFFull << 32;          // bits 32-45
constexpr uint64_t kBaseOffsetMask = 0x7ull << 49;      // bits 49-51
constexpr uint64_t kSwizzleMask = 0x3ull << 62;         // bits 62-63

// The encoder is constexpr: the hand-worked values can be checked at compile time too.
static_assert(make_smem_desc_k_major(0x400, Swizzle::k128B) == 0x4000004000010040ull, "K-major 128B");

TEST(HostWgmmaDesc, SwizzleSpans) {
    EXPECT_EQ(swizzle_span_bytes(Swizzle::k128B), 128u);
    EXPECT_EQ(swizzle_span_bytes(Swizzle::k64B), 64u);
    EXPECT_EQ(swizzle_span_bytes(Swizzle::k32B), 32u);
    EXPECT_EQ(swizzle_span_bytes(Swizzle::kNone), 16u);
}

TEST(HostWgmmaDesc, KMajor128B) {
    // smem address 0x400 (1024, 1024-aligned):
    //   start  0x400 >> 4 = 0x40                       -> bits 0-13   = 0x0000000000000040
    //   LBO    16 (unused for swizzled K-major, "1")   -> 1 << 16     = 0x0000000000010000
    //   SBO    8 rows x 128 B = 1024 -> 0x40 << 32                    = 0x0000004000000000
    //   swizzle 128B = 1 -> 1 << 62                                   = 0x4000000000000000
    EXPECT_EQ(make_smem_desc_k_major(0x400, Swizzle::k128B), 0x4000004000010040ull);
}

TEST(HostWgmmaDesc, KMajor64B) {
    // 0x2000 >> 4 = 0x200; LBO 1 << 16; SBO 8 x 64 B = 512 -> 0x20 << 32; swizzle 2 << 62
    EXPECT_EQ(make_smem_desc_k_major(0x2000, Swizzle::k64B), 0x8000002000010200ull);
}

TEST(HostWgmmaDesc, KMajor32B) {
    // 0x100 >> 4 = 0x10; LBO 1 << 16; SBO 8 x 32 B = 256 -> 0x10 << 32; swizzle 3 << 62
    EXPECT_EQ(make_smem_desc_k_major(0x100, Swizzle::k32B), 0xC000001000010010ull);
}

TEST(HostWgmmaDesc, MnMajor128BHeadDimBlocks) {
    // V tile of 176 rows (K) x head dim, 64-column blocks of 176 x 128 B = 22528 B apart:
    //   start 0x8000 >> 4 = 0x800; LBO 22528 >> 4 = 0x580 -> 0x580 << 16 = 0x05800000;
    //   SBO 8 rows x 128 B = 1024 -> 0x40 << 32; swizzle 1 << 62
    EXPECT_EQ(make_smem_desc_mn_major(0x8000, Swizzle::k128B, 176 * 128), 0x4000004005800800ull);
    // Third k16 step (k = 32) of a 128-row V tile: start += 2 x 16 rows x 128 B = 4096:
    //   start (0x8000 + 0x1000) >> 4 = 0x900; LBO 16384 >> 4 = 0x400 -> 0x04000000
    EXPECT_EQ(make_smem_desc_mn_major(0x8000 + 2 * 16 * 128, Swizzle::k128B, 128 * 128), 0x4000004004000900ull);
}

TEST(HostWgmmaDesc, KStepAdvanceInsideSwizzleRow) {
    // K-major: one k16 step of bf16 = 32 bytes = +2 in the start field and nothing else.
    const uint32_t base = 0x1C00;  // 1024-aligned
    for (uint32_t step = 0; step < 4; ++step) {
        const uint64_t d = make_smem_desc_k_major(base + 32 * step, Swizzle::k128B);
        EXPECT_EQ(d & kStartMask, (base >> 4) + 2 * step);
        EXPECT_EQ(d & ~kStartMask, make_smem_desc_k_major(base, Swizzle::k128B) & ~kStartMask);
    }
    // 0x1C20 >> 4 = 0x1C2 (start of the second k-step)
    EXPECT_EQ(make_smem_desc_k_major(0x1C20, Swizzle::k128B), 0x40000040000101C2ull);
}

TEST(HostWgmmaDesc, FieldsDoNotBleed) {
    // Shared-window addresses fit 18 bits; bits above are dropped (the ISA's (x & 0x3FFFF) >> 4),
    // never carried into the LBO field: 0x40430 -> start 0x43.
    EXPECT_EQ(make_smem_desc_k_major(0x40430, Swizzle::k128B), 0x4000004000010043ull);
    // The low 4 bits of every field are dropped (16-byte units).
    EXPECT_EQ(make_smem_desc(0x40F, 0x1F, 0x40F, Swizzle::k128B), make_smem_desc(0x400, 0x10, 0x400, Swizzle::k128B));
    // Full-width values stay in their own fields.
    const uint64_t all = make_smem_desc(0x3FFF0, 0x3FFF0, 0x3FFF0, Swizzle::k32B);
    EXPECT_EQ(all & kStartMask, 0x3FFFull);
    EXPECT_EQ((all & kLboMask) >> 16, 0x3FFFull);
    EXPECT_EQ((all & kSboMask) >> 32, 0x3FFFull);
    EXPECT_EQ(all & kBaseOffsetMask, 0ull);
    EXPECT_EQ((all & kSwizzleMask) >> 62, 3ull);
    EXPECT_EQ(all & ~(kStartMask | kLboMask | kSboMask | kSwizzleMask), 0ull) << "reserved bits stay zero";
}

// Advancing a descriptor by a byte offset equals encoding the advanced address, for every
// 16-byte step across the whole 227 KB of shared memory a CTA can have, both majors and spans.
TEST(HostWgmmaDesc, AdvanceEqualsReencoding) {
    constexpr uint32_t kMaxSharedBytes = 227 * 1024;
    constexpr uint32_t kStep = 16;
    for (Swizzle sw : {Swizzle::k128B, Swizzle::k64B}) {
        for (uint32_t base : {0u, 1024u, 49152u, 131072u}) {
            const uint64_t k0 = make_smem_desc_k_major(base, sw);
            const uint64_t m0 = make_smem_desc_mn_major(base, sw, 16384);
            for (uint32_t off = 0; base + off < kMaxSharedBytes; off += kStep) {
                ASSERT_EQ(smem_desc_advance(k0, off), make_smem_desc_k_major(base + off, sw)) << base << "+" << off;
                ASSERT_EQ(smem_desc_advance(m0, off), make_smem_desc_mn_major(base + off, sw, 16384)) << base << "+" << off;
            }
        }
    }
}

TEST(HostWgmmaDesc, NoSwizzleModeIsZero) {
    EXPECT_EQ(make_smem_desc(0x400, 0x80, 0x100, Swizzle::kNone) & kSwizzleMask, 0ull);
    EXPECT_EQ(make_smem_desc(0x400, 0x80, 0x100, Swizzle::kNone), 0x0000001000080040ull);
}

}  // namespace
