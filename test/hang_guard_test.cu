// hattn/test/hang_guard_test.cu -- the debug build's hang guard (HATTN_DEBUG_HANG, ptx/mbarrier.cuh)
// on a GPU: a wait that can never complete must trap within the guard's timeout, and the process
// must report a failed launch instead of hanging.
//
// The kernel initialises an mbarrier for one arrival that never comes and waits for its phase 0.
// The trap ends the CUDA context, so it happens in a child: the test re-executes its own binary
// (posix_spawn of /proc/self/exe; never fork() with a live CUDA context) with
// HATTN_HANG_GUARD_CHILD=1, which runs the same test in child mode. The parent waits at most
// 2 x the guard's timeout + 30 s (killing the child past that), then checks the child's exit code
// and that it printed the failed launch. Skipped without a Hopper GPU.

// This file tests the guard whatever the build type: it is on for every wait compiled here
// (Debug builds define the macro on the command line already; mbarrier.cuh tests #ifdef).
#ifndef HATTN_DEBUG_HANG
#define HATTN_DEBUG_HANG 1
#endif

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "ptx/hattn_ptx.cuh"

extern char** environ;

namespace {

constexpr const char* kChildEnv = "HATTN_HANG_GUARD_CHILD";
constexpr const char* kTestFilter = "--gtest_filter=HangGuard.NeverCompletingWaitTraps";

// The child's exit codes: only kChildTrapped is a pass.
constexpr int kChildTrapped = 42;      // the launch failed with a trap's error after >= the timeout
constexpr int kChildNoTrap = 43;       // the wait returned: the guard is not compiled in
constexpr int kChildWrongError = 44;   // the launch failed, but not with a trap's error
constexpr int kChildTooEarly = 45;     // it failed before the guard's timeout could have expired
constexpr int kChildSetupFailed = 46;  // a CUDA call before the kernel failed

constexpr double kNsPerS = 1e9;
const double kGuardTimeoutS = static_cast<double>(hattn::ptx::kMbarrierTimeoutNs) / kNsPerS;
// The parent's limit for the whole child (CUDA start-up included).
constexpr double kParentSlackS = 30.0;
const double kParentLimitS = 2.0 * kGuardTimeoutS + kParentSlackS;

constexpr int kThreads = 64;  // two warps wait, so the trap is not a single-warp accident

// Phase 0 of a barrier that expects one arrival completes only when someone arrives; nobody does.
__global__ void never_completing_wait_kernel(unsigned int* returned_from_wait) {
    __shared__ uint64_t bar;
    if (threadIdx.x == 0) {
        hattn::ptx::mbarrier_init(&bar, 1);
        hattn::ptx::fence_mbarrier_init();  // visible to the other waiting threads
    }
    __syncthreads();
    hattn::ptx::mbarrier_wait(&bar, 0);  // with HATTN_DEBUG_HANG: times out and traps
    atomicAdd(returned_from_wait, 1u);   // reached only if the wait returned
}

// ---- child mode: run the kernel, report, exit ----------------------------------------------------
[[noreturn]] void child_exit(int code) {
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(code);
}

[[noreturn]] void run_child() {
    std::printf("hang guard child: guard timeout %.1f s (kMbarrierTimeoutNs), launching a wait that never completes\n",
                kGuardTimeoutS);
    unsigned int* returned = nullptr;
    cudaError_t rc = cudaMalloc(&returned, sizeof(unsigned int));
    if (rc == cudaSuccess) rc = cudaMemset(returned, 0, sizeof(unsigned int));
    if (rc == cudaSuccess) rc = cudaDeviceSynchronize();
    if (rc != cudaSuccess) {
        std::printf("hang guard child: setup failed: %s (%s)\n", cudaGetErrorName(rc), cudaGetErrorString(rc));
        child_exit(kChildSetupFailed);
    }
    const auto start = std::chrono::steady_clock::now();
    never_completing_wait_kernel<<<1, kThreads>>>(returned);
    const cudaError_t launch_rc = cudaGetLastError();
    const cudaError_t sync_rc = cudaDeviceSynchronize();
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (launch_rc != cudaSuccess) {
        std::printf("hang guard child: the launch itself failed: %s (%s)\n", cudaGetErrorName(launch_rc),
                    cudaGetErrorString(launch_rc));
        child_exit(kChildSetupFailed);
    }
    if (sync_rc == cudaSuccess) {
        unsigned int count = 0;
        cudaMemcpy(&count, returned, sizeof(count), cudaMemcpyDeviceToHost);
        std::printf("hang guard child: the kernel COMPLETED after %.2f s (%u of %d threads returned from the wait): "
                    "the guard is not compiled in or the barrier completed\n",
                    elapsed, count, kThreads);
        child_exit(kChildNoTrap);
    }
    std::printf("hang guard child: the kernel failed after %.2f s with %s (%s)\n", elapsed, cudaGetErrorName(sync_rc),
                cudaGetErrorString(sync_rc));
    // `trap` ends the kernel with an unspecified launch failure; some drivers report it as an
    // illegal instruction.
    if (sync_rc != cudaErrorLaunchFailure && sync_rc != cudaErrorIllegalInstruction) {
        std::printf("hang guard child: expected cudaErrorLaunchFailure or cudaErrorIllegalInstruction from `trap`\n");
        child_exit(kChildWrongError);
    }
    // The host clock starts before the launch, so it must see at least the device's timeout.
    if (elapsed < kGuardTimeoutS) {
        std::printf("hang guard child: that is before the %.1f s timeout: something other than the guard failed\n",
                    kGuardTimeoutS);
        child_exit(kChildTooEarly);
    }
    std::printf("hang guard child: OK, the guard trapped the wait\n");
    child_exit(kChildTrapped);
}

// ---- parent mode: spawn, wait with a deadline, collect output --------------------------------------
struct ChildResult {
    bool spawned = false;
    std::string spawn_error;
    bool timed_out = false;
    int wait_status = 0;
    double elapsed_s = 0;
    std::string output;  // stdout and stderr together
};

std::string self_exe() {
    std::vector<char> buf(4096);
    const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
    return n > 0 ? std::string(buf.data(), static_cast<size_t>(n)) : std::string("/proc/self/exe");
}

ChildResult spawn_child_and_wait(double limit_s) {
    ChildResult r;
    int fds[2];
    if (pipe(fds) != 0) {
        r.spawn_error = std::string("pipe: ") + std::strerror(errno);
        return r;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    posix_spawn_file_actions_addclose(&actions, fds[1]);

    const std::string exe = self_exe();
    std::string env_flag = std::string(kChildEnv) + "=1";
    std::vector<char*> envp;
    for (char** e = environ; *e != nullptr; ++e) {
        if (std::strncmp(*e, kChildEnv, std::strlen(kChildEnv)) != 0) envp.push_back(*e);
    }
    envp.push_back(env_flag.data());
    envp.push_back(nullptr);
    std::string filter = kTestFilter;
    std::vector<char*> argv = {const_cast<char*>(exe.c_str()), filter.data(), nullptr};

    const auto start = std::chrono::steady_clock::now();
    pid_t pid = -1;
    const int spawn_rc = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    if (spawn_rc != 0) {
        close(fds[0]);
        r.spawn_error = std::string("posix_spawn(") + exe + "): " + std::strerror(spawn_rc);
        return r;
    }
    r.spawned = true;

    auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
    constexpr int kPollMs = 100;
    constexpr size_t kMaxOutput = 64 * 1024;
    bool pipe_open = true;
    bool exited = false;
    while (!exited) {
        if (elapsed() > limit_s) {
            r.timed_out = true;
            kill(pid, SIGKILL);
            waitpid(pid, &r.wait_status, 0);
            break;
        }
        if (pipe_open) {
            pollfd pfd{fds[0], POLLIN, 0};
            if (poll(&pfd, 1, kPollMs) > 0) {
                char buf[4096];
                const ssize_t n = read(fds[0], buf, sizeof(buf));
                if (n > 0 && r.output.size() < kMaxOutput) r.output.append(buf, static_cast<size_t>(n));
                if (n == 0) pipe_open = false;  // EOF: the child closed its end (usually: it exited)
            }
        } else {
            usleep(kPollMs * 1000);
        }
        const pid_t w = waitpid(pid, &r.wait_status, WNOHANG);
        if (w == pid) exited = true;
    }
    // Whatever is left in the pipe after the child is gone.
    for (;;) {
        char buf[4096];
        pollfd pfd{fds[0], POLLIN, 0};
        if (poll(&pfd, 1, 0) <= 0) break;
        const ssize_t n = read(fds[0], buf, sizeof(buf));
        if (n <= 0) break;
        if (r.output.size() < kMaxOutput) r.output.append(buf, static_cast<size_t>(n));
    }
    close(fds[0]);
    r.elapsed_s = elapsed();
    return r;
}

std::string describe_child_exit(int code) {
    switch (code) {
        case kChildTrapped: return "trapped as expected";
        case kChildNoTrap: return "the wait returned (no guard)";
        case kChildWrongError: return "failed with an unexpected CUDA error";
        case kChildTooEarly: return "failed before the guard's timeout";
        case kChildSetupFailed: return "CUDA setup or launch failed";
        default: return "unexpected exit code (did the child run the test?)";
    }
}

TEST(HangGuard, NeverCompletingWaitTraps) {
    if (std::getenv(kChildEnv) != nullptr) run_child();  // child mode: never returns
    HATTN_REQUIRE_HOPPER();

    std::printf("spawning the child (guard timeout %.1f s, parent limit %.0f s)\n", kGuardTimeoutS, kParentLimitS);
    const ChildResult r = spawn_child_and_wait(kParentLimitS);
    ASSERT_TRUE(r.spawned) << r.spawn_error;
    std::printf("child output (%.1f s):\n%s", r.elapsed_s, r.output.c_str());
    ASSERT_FALSE(r.timed_out) << "the child did not finish within " << kParentLimitS
                              << " s and was killed: the hang guard did not stop the wait. Child output:\n"
                              << r.output;
    ASSERT_TRUE(WIFEXITED(r.wait_status))
        << "the child died from signal " << (WIFSIGNALED(r.wait_status) ? WTERMSIG(r.wait_status) : -1) << " ("
        << (WIFSIGNALED(r.wait_status) ? strsignal(WTERMSIG(r.wait_status)) : "?") << "). Child output:\n"
        << r.output;
    const int code = WEXITSTATUS(r.wait_status);
    EXPECT_EQ(code, kChildTrapped) << "child exit code " << code << ": " << describe_child_exit(code)
                                   << ". Child output:\n"
                                   << r.output;
    EXPECT_NE(r.output.find("the kernel failed after"), std::string::npos)
        << "the child did not report the failed kernel. Child output:\n"
        << r.output;
}

}  // namespace
