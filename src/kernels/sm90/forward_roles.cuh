// hattn/src/kernels/sm90/forward_roles.cuh -- the warp roles the two forward kernels (16-bit and
// FP8) share: one producer warpgroup that issues the TMA loads and 2 or 3 consumer warpgroups of
// 64 query rows each; the register split between them; each consumer's named barriers.
#pragma once

#include <cstdint>

#include "kernels/sm90/fragment.cuh"
#include "kernels/sm90/pipeline.cuh"

namespace hattn::sm90 {

// A forward tile of kConsumers x 64 query rows and kBlockN-key blocks through kStages K/V slots.
// setmaxnreg moves registers from the producer (it only issues loads) to the consumers (S, P and
// O live in registers).
template <int kConsumers_, int kBlockN_, int kStages_>
struct ForwardShape {
    static constexpr int kConsumers = kConsumers_;
    static constexpr int kBlockM = kConsumers * kMmaM;
    static constexpr int kBlockN = kBlockN_;
    static constexpr int kStages = kStages_;
    static constexpr int kThreads = (1 + kConsumers) * kWarpgroupThreads;
    static constexpr uint32_t kProducerRegs = producer_regs(kConsumers);
    static constexpr uint32_t kConsumerRegs = consumer_regs(kConsumers);
    static_assert(kConsumers == 2 || kConsumers == 3, "register split defined for 2 or 3 consumers");
};

// Named barriers (0 is __syncthreads): a consumer waits on its own "turn" before issuing GEMMs
// and hands it to the next consumer once issued; each consumer has an epilogue barrier.
constexpr int kMaxConsumers = 3;
enum ForwardBarrierId : uint32_t {
    kTurnFirst = 1,                               // kTurnFirst + consumer
    kEpilogueFirst = kTurnFirst + kMaxConsumers,  // kEpilogueFirst + consumer
};
using TurnBarrier = NamedBarrier<2 * kWarpgroupThreads>;  // the waiting consumer + the one handing over
using EpilogueBarrier = NamedBarrier<kWarpgroupThreads>;

// Who a consumer thread is: its warpgroup's 64-row slice of the tile, its thread and lane in the
// warpgroup, and its barriers.
template <int kConsumers>
struct ConsumerRole {
    int cw;         // consumer index: rows [64 cw, 64 cw + 64) of the tile
    int tid, lane;  // thread in the warpgroup, lane in the warp
    int first_row_in_tile;  // 64 cw
    TurnBarrier my_turn, next_turn;
    EpilogueBarrier epilogue;

    __device__ __forceinline__ explicit ConsumerRole(uint32_t warpgroup)
        : cw(static_cast<int>(warpgroup) - 1),
          tid(static_cast<int>(threadIdx.x % kWarpgroupThreads)),
          lane(tid % 32),
          first_row_in_tile(cw * kMmaM),
          my_turn{static_cast<uint32_t>(kTurnFirst + cw)},
          next_turn{static_cast<uint32_t>(kTurnFirst + (cw + 1) % kConsumers)},
          epilogue{static_cast<uint32_t>(kEpilogueFirst + cw)} {}
};

}  // namespace hattn::sm90
