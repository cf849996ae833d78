"""Two-process torch.distributed smoke: all-reduce, and global vs per-rank normalization.

verl whitens advantages on the driver over the whole step batch (field-notes §5). Data-parallel
code that normalizes per rank gets a different answer; this check computes the global statistics
with all-reduce, and requires the result to equal single-process whitening of the concatenated
batch, while showing that per-rank whitening does not.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from verlenv.loopback import free_port

WORLD = 2


def batch(seed: int = 0):  # type: ignore[no-untyped-def]
    """The full batch both ranks share: values (8, 5) and a ragged response mask."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    values = torch.randn(8, 5, generator=gen) * 3 + torch.arange(8.0).unsqueeze(1)
    lengths = torch.tensor([5, 3, 4, 5, 2, 5, 1, 4])
    mask = (torch.arange(5).unsqueeze(0) < lengths.unsqueeze(1)).float()
    return values, mask


def _worker(rank: int, port: int, backend: str, out: str) -> None:
    import torch
    import torch.distributed as dist

    from verlenv.accept.algos import global_whiten, masked_whiten

    device = f"cuda:{rank}" if backend == "nccl" else "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        probe = torch.tensor([float(rank + 1)], device=device)
        dist.all_reduce(probe)
        values, mask = batch()
        rows = slice(rank * 4, rank * 4 + 4)
        shard, shard_mask = values[rows].to(device), mask[rows].to(device)
        global_white = global_whiten(shard, shard_mask).cpu()
        local_white = masked_whiten(shard, shard_mask).cpu()
        gathered = [torch.zeros_like(global_white) for _ in range(WORLD)]
        dist.all_gather_object(gathered, global_white)
        if rank == 0:
            reference = masked_whiten(values, mask)
            combined = torch.cat(gathered)
            local_all = [None] * WORLD
            dist.gather_object(local_white, local_all, dst=0)
            per_rank = torch.cat(local_all)  # type: ignore[arg-type]
            Path(out).write_text(
                json.dumps(
                    {
                        "backend": backend,
                        "world_size": WORLD,
                        "all_reduce": float(probe.item()),
                        "global_max_abs_diff": float(((combined - reference) * mask).abs().max()),
                        "per_rank_max_abs_diff": float(((per_rank - reference) * mask).abs().max()),
                    }
                )
            )
        else:
            dist.gather_object(local_white, None, dst=0)
    finally:
        dist.destroy_process_group()


def run_smoke(device: str) -> dict[str, Any]:
    """Spawn two ranks on loopback; NCCL when there are two GPUs, gloo otherwise."""
    import torch
    import torch.multiprocessing as mp

    backend = "nccl" if device.startswith("cuda") and torch.cuda.device_count() >= WORLD else "gloo"
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "result.json")
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # never NVLink multicast (shared hosts)
        mp.spawn(_worker, args=(free_port(), backend, out), nprocs=WORLD, join=True)
        result = json.loads(Path(out).read_text())
    result["all_reduce_ok"] = result["all_reduce"] == float(sum(range(1, WORLD + 1)))
    result["normalization_ok"] = result["global_max_abs_diff"] < 1e-5
    result["per_rank_differs"] = result["per_rank_max_abs_diff"] > 1e-3
    return result
