"""`check_device`: a device option refused in one line before any work (and before a run is recorded)."""

from __future__ import annotations

from dlperf.errors import ConfigError


def check_device(device: str, said: str | None = None) -> None:
    """A ConfigError unless `device` is usable here: 'cuda' needs a torch that sees a GPU, 'cuda:N' the Nth visible
    GPU; other devices are the caller's to check. One function for bench, profile, train, optimize and serve, which
    had five copies (bench's ran only after its run was recorded, so a missing GPU left a failed run in the store).
    `said`: how the caller names the setting in the message (default '--device DEVICE'; the library's 'device=...')."""
    said = said or f"--device {device}"
    if not device.startswith("cuda"):
        return
    import torch

    if not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        raise ConfigError(f"{said} asked for, but no CUDA device is available (torch {torch.__version__}, "
                          f"{build}, sees none): use {said.replace(device, 'cpu', 1)}, or a CUDA build of torch on a "
                          "machine with a GPU")
    index = device.partition(":")[2]
    count = torch.cuda.device_count()
    if index and not (index.isdigit() and int(index) < count):
        raise ConfigError(f"{said}: no such GPU ({count} visible: cuda:0 to cuda:{count - 1})")


def check_ray_device(device: str, option: str, each: str) -> None:
    """Ray gives each `each` ('trial', 'replica') a GPU of its own and shows it to it as its only one, cuda:0: a
    device naming another GPU is a ConfigError (cuda:1 failed every candidate); 'cuda' and 'cuda:0' are taken.
    One check for optimize --executor ray and serve --ray, which had two that differed (optimize refused cuda:0)."""
    if device.startswith("cuda:") and device != "cuda:0":
        raise ConfigError(f"--device {device} does not go with {option}: Ray gives each {each} a GPU of its own, "
                          f"which the {each} sees as cuda:0; give --device cuda")


def cuda_bf16_native(device: str = "cuda") -> bool:
    """Whether the GPU `device` names runs bf16 matmuls natively: compute capability 8.0 (Ampere) or newer.
    `torch.cuda.is_bf16_supported()` says True on a T4 or V100 as well (it counts emulation, and asks the current
    device, not this one), where bf16 runs slower than fp32."""
    import torch

    if not torch.cuda.is_available():
        return False
    return bool(torch.cuda.get_device_capability(torch.device(device))[0] >= 8)
