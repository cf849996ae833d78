"""Verdicts of an acceptance run: reward rises, values stay finite, LoRA trains only adapters, memory is flat.

The single-process suite and each data-parallel rank judge their own loop with these.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from verlenv.accept.loop import LoopResult
from verlenv.accept.memory import gate, warmup_steps

REWARD_MARGIN = 0.15  # chance level is 8/48 = 0.17; a policy that learned the task sits near 1.0
WINDOW = 5


@dataclass(frozen=True)
class Verdict:
    name: str
    passed: bool
    value: Any
    threshold: Any
    detail: str


def reward_verdict(rewards: list[float]) -> Verdict:
    start = sum(rewards[:WINDOW]) / min(WINDOW, len(rewards))
    end = sum(rewards[-WINDOW:]) / min(WINDOW, len(rewards))
    return Verdict(
        "reward-rises",
        end - start >= REWARD_MARGIN,
        round(end - start, 4),
        REWARD_MARGIN,
        f"mean reward {start:.3f} over the first {WINDOW} steps, {end:.3f} over the last {WINDOW}",
    )


def finite_verdict(values: list[float], what: str = "rewards, losses, grad norms and KL") -> Verdict:
    bad = sum(not math.isfinite(v) for v in values)
    return Verdict("finite", bad == 0, bad, 0, f"{what} are finite every step")


def loop_values(result: LoopResult) -> list[float]:
    return [v for r in result.records for v in (r.reward, r.pg_loss, r.vf_loss, r.grad_norm, r.kl)]


def lora_verdicts(facts: dict[str, Any]) -> list[Verdict]:
    return [
        Verdict(
            "lora-adapters-get-gradients",
            facts["adapter_grad_norm_min"] > 0,
            facts["adapter_grad_norm_min"],
            "> 0",
            "smallest LoRA adapter gradient norm over all steps",
        ),
        Verdict(
            "lora-base-frozen",
            not facts["base_changed"] and not facts["base_trainable"],
            len(facts["base_changed"]) + len(facts["base_trainable"]),
            0,
            f"{facts['base_params']} base tensors: none trainable, none changed",
        ),
    ]


def memory_verdicts(series: dict[str, list[float]], steps: int, compiled: bool = False) -> list[Verdict]:
    warmup = warmup_steps(steps, compiled)
    return [
        Verdict(
            f"memory-{v.series}",
            v.passed,
            round(v.slope_mib_per_step, 4),
            v.threshold_mib_per_step,
            f"Theil-Sen slope over steps {warmup}..{steps - 1}: {v.slope_mib_per_step:+.3f} MiB/step, "
            f"{v.growth_mib:+.1f} MiB in total",
        )
        for v in gate(series, warmup)
    ]
