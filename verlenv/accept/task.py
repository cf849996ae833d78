"""The task: reward = fraction of response tokens drawn from a small target set of words.

A random model hits the target set by chance (about 8 in 48 words); gradients that flow make it
pick target words, so the mean reward rises within a few dozen steps.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from verlenv.accept.tiny import WORDS

TARGET = frozenset(WORDS[:8])


class DataFlowError(RuntimeError):
    """The reward function saw other rollouts, or in another order, than the rollout produced."""


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str


@dataclass(frozen=True)
class Rollout:
    id: str
    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    response_text: str


def make_prompts(step: int, batch: int, seed: int, length: int = 6) -> list[Prompt]:
    rng = random.Random(seed * 100_003 + step)
    return [Prompt(f"s{step}-{i}", " ".join(rng.choice(WORDS) for _ in range(length))) for i in range(batch)]


def score(text: str) -> float:
    words = text.split()
    return sum(w in TARGET for w in words) / len(words) if words else 0.0


def reward(prompts: list[Prompt], rollouts: list[Rollout]) -> list[float]:
    """Scores in rollout order; refuses any mismatch with the prompts' ids (data-flow integrity)."""
    expected = [p.id for p in prompts]
    got = [r.id for r in rollouts]
    if expected != got:
        first = (
            next(i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b)
            if len(expected) == len(got)
            else -1
        )
        raise DataFlowError(
            f"reward inputs do not match the rollout batch: {len(got)} rollouts for {len(expected)} "
            f"prompts, first mismatch at position {first}"
        )
    return [score(r.response_text) for r in rollouts]
