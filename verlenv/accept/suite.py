"""The acceptance suite: the PPO loop, its verdicts, the distributed smoke, one JSON report."""

from __future__ import annotations

import datetime as dt
import os
import platform
import time
from dataclasses import asdict
from typing import Any

from verlenv import __version__
from verlenv.accept.loop import AcceptConfig, LoopResult, run_loop
from verlenv.accept.task import DataFlowError
from verlenv.accept.verdicts import (
    Verdict,
    finite_verdict,
    loop_values,
    lora_verdicts,
    memory_verdicts,
    reward_verdict,
)

REPORT_SCHEMA_VERSION = 1


def host_facts(device: str) -> dict[str, Any]:
    import torch

    facts: dict[str, Any] = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "device": device,
    }
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        facts.update(
            gpu=props.name,
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            cuda=torch.version.cuda,
            capability=list(torch.cuda.get_device_capability()),
        )
    return facts


def run_dp_suite(config: AcceptConfig, world: int) -> dict[str, Any]:
    """The loop data-parallel over ``world`` processes: per-rank memory gates, ranks kept in sync."""
    from verlenv.accept.dp import run_dp  # spawns processes: only when data parallel is asked for

    started = time.perf_counter()
    dp = run_dp(config, world)
    verdicts = [Verdict(**dp["ranks"][0]["reward_verdict"])]
    for rank in dp["ranks"]:
        verdicts += [Verdict(**{**v, "name": f"rank{rank['rank']}-{v['name']}"}) for v in rank["verdicts"]]
    spread = max(r["param_checksum_spread"] for r in dp["ranks"])
    verdicts.append(
        Verdict(
            "ranks-in-sync",
            spread == 0.0,
            spread,
            0.0,
            f"{dp['backend']}: parameter checksums identical on all {world} ranks after training "
            "(gradients all-reduced every step)",
        )
    )
    report = _report(config, None, verdicts, None, time.perf_counter() - started)
    report["data_parallel"] = dp
    report["algorithms"] = dp["ranks"][0]["algorithms"]
    report["backend"] = f"hf on each of {world} ranks ({dp['backend']})"
    return report


def run_suite(config: AcceptConfig, *, distributed: bool = True, on_step=None) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    verdicts: list[Verdict] = []
    result: LoopResult | None = None
    try:
        result = run_loop(config, on_step=on_step)
    except DataFlowError as exc:
        verdicts.append(Verdict("data-flow-integrity", False, str(exc), "ids match", "reward inputs vs rollouts"))
    if result is not None:
        verdicts.append(
            Verdict(
                "data-flow-integrity",
                True,
                "ids match",
                "ids match",
                f"{config.steps * config.batch} rollouts scored in order, id for id",
            )
        )
        verdicts += [reward_verdict([r.reward for r in result.records]), finite_verdict(loop_values(result))]
        verdicts += memory_verdicts(result.memory, config.steps, _compiled(result.backend, config))
        if config.lora:
            verdicts += lora_verdicts(result.lora)
    smoke = None
    if distributed:
        from verlenv.accept.dist import run_smoke

        smoke = run_smoke(config.device)
        verdicts.append(
            Verdict(
                "distributed-all-reduce",
                smoke["all_reduce_ok"],
                smoke["all_reduce"],
                3.0,
                f"{smoke['backend']}, {smoke['world_size']} processes",
            )
        )
        verdicts.append(
            Verdict(
                "global-normalization",
                smoke["normalization_ok"] and smoke["per_rank_differs"],
                smoke["global_max_abs_diff"],
                1e-5,
                f"all-reduced whitening equals single-process whitening; per-rank whitening "
                f"differs by {smoke['per_rank_max_abs_diff']:.3f}",
            )
        )
    return _report(config, result, verdicts, smoke, time.perf_counter() - started)


def run_trainer_suite(config, workdir, on_line=None) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """verl's own trainer on the tiny model (accept/trainer.py), judged by the same verdicts."""
    from verlenv.accept import trainer
    from verlenv.accept.memory import warmup_steps

    run = trainer.run(workdir, config, on_line)
    engine = trainer.ROLLOUTS[config.rollout]
    rewards = trainer.rewards(run.steps)
    verdicts = [
        Verdict("verl-exit", run.exit_code == 0, run.exit_code, 0, "python -m verl.trainer.main_ppo exit code"),
        Verdict("verl-steps", len(run.steps) >= config.steps, len(run.steps), config.steps, "steps verl logged"),
    ]
    if rewards:
        values = rewards + [float(v) for s in run.steps for k, v in s["data"].items() if k in trainer.LOSSES]
        verdicts += [reward_verdict(rewards), finite_verdict(values, "scores and losses verl logged")]
    verdicts += memory_verdicts(run.memory, len(run.steps), config.compiled) if len(run.steps) >= 6 else []
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "tool": "verlenv accept --trainer verl",
        "verlenv_version": __version__,
        "image_id": os.environ.get("VERLENV_IMAGE_ID", ""),
        "profile": os.environ.get("VERLENV_PROFILE", ""),
        "created": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "passed": all(v.passed for v in verdicts),
        "seconds": round(run.seconds, 2),
        "config": asdict(config),
        "host": host_facts("cuda" if config.gpus else "cpu"),
        "backend": f"verl main_ppo ({config.estimator.upper()}, FSDP actor, {engine} rollout)",
        "rollout_mode": f"{engine} eager (rollout.enforce_eager=True)"
        if config.eager
        else "verl's default (compiled, CUDA graphs)",
        "attention": config.attn or "verl's default (flash_attention_2, use_remove_padding)",
        "memory_warmup_steps": warmup_steps(len(run.steps), config.compiled),
        "files_manifest_sha256": os.environ.get("VERLENV_FILES_SHA256", ""),
        "algorithms": "verl",
        "verdicts": [asdict(v) for v in verdicts],
        "steps": [trainer.step_summary(s) for s in run.steps],
        "memory": run.memory,
        "overrides": run.overrides,
        "log_tail": run.log_tail[-80:],
    }


def _compiled(backend: str, config: AcceptConfig) -> bool:
    from verlenv.accept.rollout import compiled_mode

    return compiled_mode(backend, config.engine_kwargs(backend))


def _report(config, result, verdicts, smoke, seconds) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    from verlenv.accept.memory import warmup_steps
    from verlenv.accept.rollout import mode_name

    backend = result.backend if result else ""
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "tool": "verlenv accept",
        "verlenv_version": __version__,
        "image_id": os.environ.get("VERLENV_IMAGE_ID", ""),
        "profile": os.environ.get("VERLENV_PROFILE", ""),
        "created": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "passed": bool(verdicts) and all(v.passed for v in verdicts),
        "seconds": round(seconds, 2),
        "config": asdict(config),
        "host": host_facts(config.device),
        "backend": result.backend if result else None,
        "rollout_mode": mode_name(backend, config.engine_kwargs(backend)) if result else None,
        "memory_warmup_steps": warmup_steps(config.steps, _compiled(backend, config)),
        "files_manifest_sha256": os.environ.get("VERLENV_FILES_SHA256", ""),
        "algorithms": result.algorithms if result else None,
        "verdicts": [asdict(v) for v in verdicts],
        "steps": [asdict(r) for r in result.records] if result else [],
        "memory": result.memory if result else {},
        "lora": result.lora if result else {},
        "distributed": smoke,
    }


def summary(report: dict[str, Any]) -> str:
    steps = report["steps"]
    mode = report.get("rollout_mode") or report["backend"]
    lines = [
        f"acceptance: {'PASSED' if report['passed'] else 'FAILED'} in {report['seconds']:.1f}s "
        f"({len(steps)} steps, {mode}, PPO math from {report['algorithms']}, "
        f"device {report['host']['device']})"
    ]
    if steps:
        lines.append(
            f"  reward {steps[0]['reward']:.3f} -> {steps[-1]['reward']:.3f}; per step: gen "
            f"{_mean(steps, 'gen_s'):.3f}s, train {_mean(steps, 'train_s'):.3f}s, sync {_mean(steps, 'sync_s'):.3f}s"
        )
    for v in report["verdicts"]:
        mark = "ok" if v["passed"] else "FAIL"
        lines.append(f"  [{mark}] {v['name']}: {v['detail']} (value {v['value']}, limit {v['threshold']})")
    return "\n".join(lines)


def _mean(steps: list[dict[str, Any]], key: str) -> float:
    return sum(s[key] for s in steps) / len(steps)


def plot(report: dict[str, Any], path: str) -> bool:
    """PNG of reward and memory per step; False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    top.plot([s["reward"] for s in report["steps"]])
    top.set_ylabel("mean reward")
    for name, series in report["memory"].items():
        bottom.plot([v - series[0] for v in series], label=name)
    bottom.set_ylabel("MiB since step 0")
    bottom.set_xlabel("step")
    bottom.legend()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
