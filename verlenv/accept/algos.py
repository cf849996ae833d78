"""PPO math: verl's own core_algos when verl imports, else this module's implementation.

The local functions follow verl's formulas exactly (masked_whiten with Bessel-corrected variance,
GAE over response tokens, dual-clip PPO with clip_ratio_c = 3, clipped value loss with a 0.5
factor, token-mean aggregation), so the suite computes the same thing either way; a test runs
both on the same tensors wherever verl imports.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

CLIP_RATIO_C = 3.0


def masked_mean(values, mask):  # type: ignore[no-untyped-def]
    return (values * mask).sum() / (mask.sum() + 1e-8)


def masked_whiten(values, mask):  # type: ignore[no-untyped-def]
    mean = masked_mean(values, mask)
    var = masked_mean((values - mean) ** 2, mask)
    count = mask.sum()
    var = var * count / (count - 1)
    import torch

    return (values - mean) * torch.rsqrt(var + 1e-8)


def gae(token_level_rewards, values, mask, gamma: float, lam: float, whiten=None):  # type: ignore[no-untyped-def]
    import torch

    with torch.no_grad():
        next_value = 0.0
        last = 0.0
        reversed_adv = []
        for t in reversed(range(token_level_rewards.shape[-1])):
            delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
            candidate = delta + gamma * lam * last
            next_value = values[:, t] * mask[:, t] + (1 - mask[:, t]) * next_value
            last = candidate * mask[:, t] + (1 - mask[:, t]) * last
            reversed_adv.append(last)
        advantages = torch.stack(reversed_adv[::-1], dim=1)
        returns = advantages + values
        return (whiten or masked_whiten)(advantages, mask), returns


def policy_loss(old_log_prob, log_prob, advantages, mask, clip: float):  # type: ignore[no-untyped-def]
    import torch

    ratio = torch.exp(torch.clamp(log_prob - old_log_prob, -20.0, 20.0))
    loss1 = -advantages * ratio
    loss2 = -advantages * torch.clamp(ratio, 1 - clip, 1 + clip)
    clipped = torch.maximum(loss1, loss2)
    dual = torch.min(-advantages * CLIP_RATIO_C, clipped)
    losses = torch.where(advantages < 0, dual, clipped)
    return masked_mean(losses, mask)


def value_loss(vpreds, returns, values, mask, clip: float):  # type: ignore[no-untyped-def]
    import torch

    clipped = torch.clamp(vpreds, values - clip, values + clip)
    losses = torch.max((vpreds - returns) ** 2, (clipped - returns) ** 2)
    return 0.5 * masked_mean(losses, mask)


@dataclass(frozen=True)
class Algorithms:
    source: str  # "verl X.Y.Z" or "verlenv"
    gae: Callable[..., Any]
    policy_loss: Callable[..., Any]
    value_loss: Callable[..., Any]


LOCAL = Algorithms("verlenv", gae, policy_loss, value_loss)


def from_verl() -> Algorithms | None:
    """verl's own functions behind the same call shapes, or None when verl does not import."""
    try:
        import verl
        from verl.trainer.ppo import core_algos
    except Exception:  # noqa: BLE001 - verl needs ray & co; any import failure means "use ours"
        return None

    def verl_gae(rewards, values, mask, gamma, lam):  # type: ignore[no-untyped-def]
        return core_algos.compute_gae_advantage_return(rewards, values, mask, gamma, lam)

    def verl_policy(old, new, adv, mask, clip):  # type: ignore[no-untyped-def]
        # compute_policy_loss kept its (old, new, adv, mask, cliprange) shape from 0.4 to 0.9;
        # it returns a tuple whose first element is the loss. 0.9 marks it deprecated in favour of
        # compute_policy_loss_vanilla, which needs a full ActorConfig; the math is the same, so the
        # stable call is kept and its FutureWarning silenced rather than shown to every user.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            out = core_algos.compute_policy_loss(
                old, new, adv, mask, cliprange=clip, clip_ratio_c=CLIP_RATIO_C, loss_agg_mode="token-mean"
            )
        return out[0]

    def verl_value(vpreds, returns, values, mask, clip):  # type: ignore[no-untyped-def]
        out = core_algos.compute_value_loss(vpreds, returns, values, mask, clip)
        return out[0] if isinstance(out, tuple) else out

    return Algorithms(f"verl {getattr(verl, '__version__', '?')}", verl_gae, verl_policy, verl_value)


def pick(prefer_verl: bool = True) -> Algorithms:
    return (from_verl() if prefer_verl else None) or LOCAL


def global_whiten(values, mask):  # type: ignore[no-untyped-def]
    """masked_whiten with mean and Bessel-corrected variance over every rank's tokens (all-reduce)."""
    import torch
    import torch.distributed as dist

    stats = torch.stack([(values * mask).sum(), (values**2 * mask).sum(), mask.sum()]).double()
    dist.all_reduce(stats)
    total, total_sq, count = stats
    mean = total / count
    var = (total_sq / count - mean**2) * count / (count - 1)
    return ((values - mean) * torch.rsqrt(var + 1e-8)).to(values.dtype)


def distributed() -> Algorithms:
    def dist_gae(rewards, values, mask, gamma, lam):  # type: ignore[no-untyped-def]
        return gae(rewards, values, mask, gamma, lam, whiten=global_whiten)

    return Algorithms("verlenv (data parallel, global whitening)", dist_gae, policy_loss, value_loss)
