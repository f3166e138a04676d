// hattn/ptx/hattn_ptx.cuh -- the whole PTX layer in one include.
#pragma once

#include "atomic.cuh"
#include "barrier.cuh"
#include "cluster.cuh"
#include "common.cuh"
#include "convert.cuh"
#include "fence.cuh"
#include "global.cuh"
#include "griddep.cuh"
#include "ldst.cuh"
#include "mbarrier.cuh"
#include "mma.cuh"
#include "mufu.cuh"
#include "tma.cuh"
#include "warp.cuh"
#include "wgmma.cuh"
