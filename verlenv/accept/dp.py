"""The PPO loop data-parallel over several processes: one per GPU with NCCL, or gloo on CPU.

Each rank takes its share of every step's prompts, whitens advantages with all-reduced statistics,
all-reduces gradients before the optimizer step, and gates its own memory series. At the end the
ranks must hold identical parameters, the proof that the gradients really were all-reduced.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from verlenv.accept.tiny import TinySpec, make_tiny
from verlenv.loopback import free_port


def _rank_main(rank: int, world: int, port: int, backend: str, config_json: str, out: str, model_dir: str) -> None:
    import torch
    import torch.distributed as dist

    from verlenv.accept.loop import AcceptConfig, run_loop
    from verlenv.accept.verdicts import memory_verdicts, reward_verdict

    fields = json.loads(config_json)
    device = f"cuda:{rank}" if backend == "nccl" else fields["device"]
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        config = AcceptConfig(**{**fields, "device": device, "rank": rank, "world_size": world})
        result = run_loop(config, workdir=Path(model_dir))
        checksum = torch.tensor(
            [sum(float(p.detach().double().sum()) for p in result.params)],
            dtype=torch.float64,
            device=device if backend == "nccl" else "cpu",
        )
        low, high = checksum.clone(), checksum.clone()
        dist.all_reduce(low, op=dist.ReduceOp.MIN)
        dist.all_reduce(high, op=dist.ReduceOp.MAX)
        mine = {
            "rank": rank,
            "device": device,
            "rewards": [r.reward for r in result.records],
            "memory": result.memory,
            "verdicts": [dataclasses.asdict(v) for v in memory_verdicts(result.memory, config.steps)],
            "reward_verdict": dataclasses.asdict(reward_verdict([r.reward for r in result.records])),
            "param_checksum_spread": float(high - low),
            "algorithms": result.algorithms,
        }
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, mine)
        if rank == 0:
            Path(out).write_text(json.dumps({"backend": backend, "world_size": world, "ranks": gathered}))
        # Both ranks reach teardown together: a gloo rank whose peer has already closed its pairs can
        # abort in gloo's own threads ("terminate called without an active exception", seen once in CI).
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_dp(config, world: int) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    import torch
    import torch.multiprocessing as mp

    nccl = config.device.startswith("cuda") and torch.cuda.device_count() >= world
    backend = "nccl" if nccl else "gloo"
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # never NVLink multicast (shared hosts)
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "dp.json")
        fields = {k: v for k, v in dataclasses.asdict(config).items() if k not in ("rank", "world_size")}
        # One model for all ranks, made here: under a process group, transformers saves on rank 0 only.
        model_dir = Path(tmp) / "tiny"
        make_tiny(model_dir, TinySpec(seed=config.seed))
        mp.spawn(
            _rank_main,
            args=(world, free_port(), backend, json.dumps(fields), out, str(model_dir)),
            nprocs=world,
            join=True,
        )
        return json.loads(Path(out).read_text())
