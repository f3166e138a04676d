// hattn/src/kernels/sm90/launch_setup.h -- the host-side set-up of a kernel launch that does not
// change from call to call, done once per (kernel, device) instead of on every call.
//
// Measured on an H200 (bench/host_overhead_bench, RESULTS run 37): cudaFuncSetAttribute costs the
// calling thread ~0.5 us, an occupancy query ~0.3-0.4 us, a driver entry-point lookup ~0.15 us (the
// forward encodes four tensor maps), against ~4-5 us for the launch itself. A caller launching small
// attentions back to back is bound by that host time.
//
// What is kept, and why it is not hidden mutable state in the usual sense: each kernel template
// instantiation owns one bit per device ordinal saying "this device has the attribute set" (and,
// for occupancy, the number), written once from unset to set with atomics; two threads racing
// both do the (idempotent) CUDA call. Devices with ordinals >= 64 are not cached (every call sets).
// A device reset drops a kernel's attributes with its context while the bit stays set: the launch
// then fails with cudaErrorInvalidValue, and launch_with_dynamic_smem clears the bit, sets the
// attribute again and retries once.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>

namespace hattn::sm90 {

constexpr int kDefaultDynamicSmemBytes = 48 * 1024;  // more must be opted into per kernel and device
constexpr int kCachedDevices = 64;                   // device ordinals with a cache bit

namespace detail {

// The device ordinal's bit, 0 when it has none (not cached) or cudaGetDevice failed (rc says so).
inline uint64_t device_bit(cudaError_t* rc) {
    int device = 0;
    *rc = cudaGetDevice(&device);
    return *rc == cudaSuccess && device >= 0 && device < kCachedDevices ? uint64_t{1} << device : 0;
}

template <auto kKernel>
std::atomic<uint64_t>& smem_attribute_set() {
    static std::atomic<uint64_t> devices{0};
    return devices;
}

}  // namespace detail

// cudaFuncSetAttribute(kKernel, MaxDynamicSharedMemorySize, bytes), the first time on each device
// (a kernel's launches always ask the same bytes: its shared-memory layout is a type).
template <auto kKernel>
cudaError_t ensure_dynamic_smem(int bytes) {
    if (bytes <= kDefaultDynamicSmemBytes) return cudaSuccess;
    cudaError_t rc = cudaSuccess;
    const uint64_t bit = detail::device_bit(&rc);
    if (rc != cudaSuccess) return rc;
    std::atomic<uint64_t>& set = detail::smem_attribute_set<kKernel>();
    if ((set.load(std::memory_order_acquire) & bit) != 0) return cudaSuccess;
    rc = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (rc == cudaSuccess) set.fetch_or(bit, std::memory_order_release);
    return rc;
}

// ensure_dynamic_smem, then launch() (which enqueues kKernel with `bytes` of dynamic shared memory
// and returns its status): when the launch says cudaErrorInvalidValue with the attribute cached,
// the device may have been reset since, so the attribute is set again and the launch retried once.
template <auto kKernel, class Launch>
cudaError_t launch_with_dynamic_smem(int bytes, Launch&& launch) {
    cudaError_t rc = ensure_dynamic_smem<kKernel>(bytes);
    if (rc != cudaSuccess) return rc;
    rc = launch();
    if (rc == cudaErrorInvalidValue && bytes > kDefaultDynamicSmemBytes) {
        cudaError_t device_rc = cudaSuccess;
        const uint64_t bit = detail::device_bit(&device_rc);
        detail::smem_attribute_set<kKernel>().fetch_and(~bit, std::memory_order_acq_rel);
        rc = ensure_dynamic_smem<kKernel>(bytes);
        if (rc == cudaSuccess) rc = launch();
    }
    return rc;
}

// cudaOccupancyMaxActiveBlocksPerMultiprocessor for (kKernel, threads, bytes), remembered per
// device (a kernel's launches always use the same block size and shared memory). The first query
// on a device sets the shared-memory attribute first: occupancy counts the bytes against it.
template <auto kKernel, int kThreads, int kBytes>
cudaError_t max_active_ctas_per_sm(int* ctas) {
    static std::atomic<int> known[kCachedDevices] = {};  // 0: not known yet, else ctas + 1
    int device = 0;
    cudaError_t rc = cudaGetDevice(&device);
    if (rc != cudaSuccess) return rc;
    const bool cached = device >= 0 && device < kCachedDevices;
    if (cached) {
        const int v = known[device].load(std::memory_order_relaxed);
        if (v > 0) {
            *ctas = v - 1;
            return cudaSuccess;
        }
    }
    rc = ensure_dynamic_smem<kKernel>(kBytes);
    if (rc != cudaSuccess) return rc;
    rc = cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas, kKernel, kThreads, kBytes);
    if (rc == cudaSuccess && cached) known[device].store(*ctas + 1, std::memory_order_relaxed);
    return rc;
}

// kernel<<<grid, block, smem_bytes, stream>>>(args...) through cudaLaunchKernelEx with the first
// num_attributes of `attributes` (0: a plain launch), then the launch's error state.
template <class... Params, class... Args>
cudaError_t launch_kernel_ex(void (*kernel)(Params...), dim3 grid, dim3 block, int smem_bytes, cudaStream_t stream,
                             cudaLaunchAttribute* attributes, unsigned num_attributes, Args&&... args) {
    cudaLaunchConfig_t config{grid, block, static_cast<size_t>(smem_bytes), stream, attributes, num_attributes};
    const cudaError_t rc = cudaLaunchKernelEx(&config, kernel, static_cast<Args&&>(args)...);
    return rc != cudaSuccess ? rc : cudaGetLastError();
}

// The launch attribute (cudaLaunchKernelEx) of programmatic dependent launch: the kernel may start
// before the previous one in its stream has finished (it must griddepcontrol.wait before reading
// or writing what that kernel touches).
inline cudaLaunchAttribute programmatic_launch_attribute() {
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    return attribute;
}

// The launch attribute (cudaLaunchKernelEx) that groups a 1-D grid's thread blocks into clusters
// of `ctas` consecutive ones.
inline cudaLaunchAttribute cluster_dimension_attribute(unsigned ctas) {
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = ctas;
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    return attribute;
}

}  // namespace hattn::sm90
