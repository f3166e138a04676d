"""Whether this machine can run hattn's kernels, and why not (the GPU tests skip with this reason)."""
import torch


def missing_hopper() -> str:
    """'' on a usable Hopper GPU (compute capability 9.0), else the reason the GPU tests skip."""
    if not torch.cuda.is_available():
        return "no CUDA device (torch.cuda.is_available() is False): hattn's kernels need a Hopper GPU"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        return (f"{torch.cuda.get_device_name()} is compute capability {major}.{minor}; hattn's sm_90a kernels "
                "need a Hopper GPU (9.0)")
    return ""
