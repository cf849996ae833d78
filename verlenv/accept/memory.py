"""Memory sampling every step and a robust growth gate (Theil–Sen slope after a warm-up).

Threshold: 0.5 MiB/step for every series. A leak at that rate costs 5 GiB over a 10,000-step run
on each GPU, enough to turn a healthy 1,000-GPU job into an OOM half-way; and it sits below the
1 MiB/step that `--inject-leak-mib 1` adds, so the detector provably fires on the smallest
injected leak. Theil–Sen (median of pairwise slopes) ignores the one-off jumps that allocator
caching and garbage collection cause, which a least-squares fit would not.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from statistics import median

MIB = 1 << 20
THRESHOLD_MIB_PER_STEP = 0.5


@dataclass
class MemorySampler:
    device: str
    series: dict[str, list[float]] = field(default_factory=dict)
    _nvml: object = None

    def __post_init__(self) -> None:
        names = ["rss_mib"]
        if self.device.startswith("cuda"):
            names += ["cuda_allocated_mib", "cuda_reserved_mib"]
            self._nvml = _nvml_handle()
            if self._nvml is not None:
                names.append(nvml_series_name(self._nvml))
        self.series = {name: [] for name in names}

    def sample(self) -> dict[str, float]:
        import psutil

        values = {"rss_mib": psutil.Process(os.getpid()).memory_info().rss / MIB}
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()
            values["cuda_allocated_mib"] = torch.cuda.memory_allocated() / MIB
            values["cuda_reserved_mib"] = torch.cuda.memory_reserved() / MIB
            if self._nvml is not None:
                values[nvml_series_name(self._nvml)] = nvml_used_mib(self._nvml, os.getpid())
        for name, value in values.items():
            self.series[name].append(value)
        return values


def _nvml_handle() -> object:
    try:
        import pynvml
        import torch

        pynvml.nvmlInit()
        index = torch.cuda.current_device()
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible and visible.split(",")[index].isdigit():
            index = int(visible.split(",")[index])
        return pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # noqa: BLE001 - NVML is optional: the other series still gate
        return None


def tree_pids(root: int) -> set[int]:
    """``root`` and every process descended from it (read from /proc: engine cores, Ray workers)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as handle:  # noqa: PTH123 - hundreds of small reads
                    parent = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, queue = {root}, [root]
    while queue:
        for child in children.get(queue.pop(), []):
            if child not in found:
                found.add(child)
                queue.append(child)
    return found


def _per_process(handle: object) -> list[object] | None:
    import pynvml

    try:
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except Exception:  # noqa: BLE001 - some virtualized GPUs do not attribute memory to processes
        return None
    return procs if procs and all(p.usedGpuMemory is not None for p in procs) else None


def nvml_series_name(handle: object) -> str:
    """Per process tree when NVML can attribute memory (several runs may share one GPU), else device-wide."""
    return "nvml_process_mib" if _per_process(handle) is not None else "nvml_used_mib"


def nvml_used_mib(handle: object, root: int) -> float:
    """GPU memory held by ``root``'s process tree; the whole device's when NVML cannot say per process."""
    import pynvml

    procs = _per_process(handle)
    if procs is None:
        return pynvml.nvmlDeviceGetMemoryInfo(handle).used / MIB
    pids = tree_pids(root)
    return sum(p.usedGpuMemory for p in procs if p.pid in pids) / MIB


def warmup_steps(steps: int, compiled: bool) -> int:
    """Steps left out of the memory gate. A compiled engine (torch.compile, CUDA graphs) allocates its
    graph pools and compile workspaces over the first wake/sleep cycles: it gets a longer warm-up,
    never a looser threshold."""
    return max(6, steps // 3) if compiled else max(3, steps // 5)


def theil_sen(values: list[float]) -> float:
    """Median of the pairwise slopes (per step)."""
    slopes = [(values[j] - values[i]) / (j - i) for i in range(len(values)) for j in range(i + 1, len(values))]
    return median(slopes) if slopes else 0.0


@dataclass(frozen=True)
class MemoryVerdict:
    series: str
    slope_mib_per_step: float
    threshold_mib_per_step: float
    growth_mib: float  # slope x steps after warm-up
    steps: int
    passed: bool


def gate(series: dict[str, list[float]], warmup: int, threshold: float = THRESHOLD_MIB_PER_STEP) -> list[MemoryVerdict]:
    verdicts = []
    for name, values in series.items():
        tail = values[warmup:]
        slope = theil_sen(tail)
        verdicts.append(MemoryVerdict(name, slope, threshold, slope * len(tail), len(tail), slope <= threshold))
    return verdicts


class LeakInjector:
    """Holds ``mib`` MiB more on every call: on the GPU when training there, else in host memory."""

    def __init__(self, mib: int, device: str) -> None:
        self.mib, self.device, self.held = mib, device, []  # type: ignore[var-annotated]

    def step(self) -> None:
        if not self.mib:
            return
        if self.device.startswith("cuda"):
            import torch

            self.held.append(torch.ones(self.mib * MIB // 4, dtype=torch.float32, device=self.device))
        else:
            self.held.append(bytearray(os.urandom(16)) * (self.mib * MIB // 16))  # touched pages count in RSS
