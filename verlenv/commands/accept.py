"""verlenv accept: run the acceptance suite here (inside an image, or from source on a GPU host)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from verlenv import atomic
from verlenv.errors import CheckFailed, ConfigError

NAME = "accept"
HELP = (
    "Train a tiny causal LM with PPO for a few dozen steps (rollout, reward with id checks, GAE, clipped "
    "policy and value losses, KL penalty, weight sync), require the reward to rise, gate memory growth "
    "(Theil-Sen slope after warm-up, every step: CUDA allocated/reserved, NVML, RSS), and run a two-process "
    "torch.distributed smoke. Writes a JSON report; exit 1 when a verdict fails."
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=30, help="PPO steps (default 30)")
    parser.add_argument("--batch", type=int, default=64, help="prompts per step (default 64)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default)")
    parser.add_argument(
        "--backend",
        choices=("auto", "hf", "vllm", "sglang"),
        default="auto",
        help="rollout engine: on a GPU vLLM, else SGLang, when it imports; hf otherwise (default auto); with "
        "--trainer verl, verl's rollout.name: auto takes vllm, else sglang, whichever is installed",
    )
    parser.add_argument(
        "--engine-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="pass KEY=VALUE to the rollout engine's constructor (vLLM's LLM, sglang.Engine) over verlenv's "
        'defaults; VALUE is read as JSON when it parses (0.3, true, "fa3"), else as a string (repeatable); '
        "with --trainer verl it becomes verl's actor_rollout_ref.rollout.engine_kwargs.<vllm|sglang>.KEY",
    )
    parser.add_argument("--lora", action="store_true", help="train LoRA adapters; check the base stays frozen")
    parser.add_argument(
        "--inject-leak-mib",
        type=int,
        default=0,
        metavar="N",
        help="hold N MiB more every step, to prove the memory gate fires",
    )
    parser.add_argument("--no-verl", action="store_true", help="use verlenv's PPO math even when verl imports")
    parser.add_argument("--no-distributed", action="store_true", help="skip the two-process smoke")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--world-size",
        type=int,
        default=1,
        metavar="N",
        help="run the loop data-parallel over N processes (NCCL with N GPUs, gloo otherwise)",
    )
    parser.add_argument(
        "--trainer",
        choices=("loop", "verl"),
        default="loop",
        help="loop: verlenv's own PPO loop (default); verl: python -m verl.trainer.main_ppo on the tiny model "
        "(FSDP actor, vLLM rollout, one node), judged by verl's own metrics",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="with --trainer verl: compose and validate the config with verl's own Hydra files, then stop",
    )
    parser.add_argument(
        "--eager",
        action="store_true",
        help="run the rollout engine eager (vLLM enforce_eager, SGLang disable_cuda_graph, verl "
        "rollout.enforce_eager): an explicit non-default mode; by default the engines compile and capture CUDA graphs",
    )
    parser.add_argument(
        "--estimator",
        choices=("grpo", "gae"),
        default="grpo",
        help="with --trainer verl: grpo (groups of --group responses) or gae (PPO with verl's critic, which verl "
        "0.9.1 loads with flash_attention_2)",
    )
    parser.add_argument("--group", type=int, default=8, help="with --trainer verl and grpo: responses per prompt")
    parser.add_argument(
        "--attn",
        default="",
        help="with --trainer verl: attn_implementation for actor and critic instead of verl's default "
        "(flash_attention_2 with remove-padding), e.g. sdpa where flash-attn is not installed",
    )
    parser.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=0.3,
        help="with --trainer verl: the rollout's share of GPU memory (lower it to run several on one GPU)",
    )
    parser.add_argument("--gpus", type=int, default=1, help="with --trainer verl: GPUs on this node (default 1)")
    parser.add_argument("--workdir", type=Path, help="with --trainer verl: keep model, data and logs here")
    parser.add_argument("--report", type=Path, default=Path("acceptance-report.json"), help="where to write JSON")
    parser.add_argument("--plot", type=Path, help="also write a PNG of reward and memory per step (needs matplotlib)")
    parser.add_argument("--json", action="store_true", help="print the report to stdout")
    parser.add_argument("-q", "--quiet", action="store_true", help="no per-step progress")


def execute(args: argparse.Namespace) -> int:
    if args.trainer == "verl":
        return _verl_trainer(args)
    from verlenv.accept.loop import AcceptConfig
    from verlenv.accept.suite import plot, run_suite

    device = _device(args.device)
    config = AcceptConfig(
        steps=args.steps,
        batch=args.batch,
        device=device,
        backend=args.backend,
        lora=args.lora,
        inject_leak_mib=args.inject_leak_mib,
        seed=args.seed,
        prefer_verl=not args.no_verl,
        engine_args=engine_args(args.engine_arg),
        eager=args.eager,
    )

    def progress(record) -> None:  # type: ignore[no-untyped-def]
        if not args.quiet:
            mem = ", ".join(f"{k} {v:.0f}" for k, v in record.memory.items())
            print(
                f"[accept] step {record.step:3d}  reward {record.reward:.3f}  pg {record.pg_loss:+.4f}  "
                f"vf {record.vf_loss:.4f}  gen {record.gen_s:.2f}s train {record.train_s:.2f}s  {mem}",
                file=sys.stderr,
                flush=True,
            )

    if args.world_size > 1:
        from verlenv.accept.suite import run_dp_suite

        report = run_dp_suite(config, args.world_size)
    else:
        report = run_suite(config, distributed=not args.no_distributed, on_step=progress)
    if args.plot and not plot(report, str(args.plot)):
        print("accept: matplotlib is not installed; no plot written", file=sys.stderr)
    return _finish(report, args)


def engine_args(pairs: list[str]) -> tuple[tuple[str, Any], ...]:
    parsed = []
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.isidentifier():
            raise ConfigError(f"--engine-arg {pair!r}: expected KEY=VALUE with KEY a keyword argument name")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        parsed.append((key, value))
    return tuple(parsed)


def _verl_trainer(args: argparse.Namespace) -> int:
    import tempfile

    from verlenv.accept import trainer
    from verlenv.accept.suite import run_trainer_suite

    rollout = trainer.rollout_for(args.backend, installed=not args.dry_run)
    config = trainer.TrainerConfig(
        rollout=rollout,
        steps=args.steps,
        batch=args.batch,
        gpus=args.gpus,
        seed=args.seed,
        estimator=args.estimator,
        group=args.group,
        attn=args.attn,
        eager=args.eager,
        gpu_memory_utilization=args.gpu_memory_utilization,
        extra=trainer.engine_overrides(engine_args(args.engine_arg), rollout),
    )
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="verlenv-verl-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if args.dry_run:
        facts = trainer.dry_run(trainer.prepare(workdir, config), config)
        print(json.dumps(facts, indent=2) if args.json else f"verl config valid: {facts}")
        return 0

    def echo(line: str) -> None:
        if not args.quiet:
            print(f"[verl] {line}", file=sys.stderr, flush=True)

    return _finish(run_trainer_suite(config, workdir, on_line=echo), args)


def _finish(report: dict, args: argparse.Namespace) -> int:  # type: ignore[type-arg]
    from verlenv.accept.suite import summary

    atomic.write_text(args.report, json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2) if args.json else summary(report))
    if not args.json:
        print(f"report: {args.report}")
    if not report["passed"]:
        failed = [v["name"] for v in report["verdicts"] if not v["passed"]]
        raise CheckFailed(f"acceptance failed: {', '.join(failed)}", hint=f"details in {args.report}")
    return 0


def _device(choice: str) -> str:
    if choice != "auto":
        return choice
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        raise CheckFailed("torch is not installed: the acceptance suite needs the image's training stack") from None
