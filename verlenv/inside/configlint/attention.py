"""The attention implementation each model will load with, against the kernels the environment has.

verl 0.6+ gives every Hugging Face model attn_implementation=flash_attention_2 unless
`<model>.override_config.attn_implementation` says otherwise, and its critic's value-head loader passes
flash_attention_2 itself, whatever the config says. Where flash-attn is missing the job fails at model
load, after Ray, the rollout engine and the data are up (field-notes §10; the H200 run of 2026-12-03).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from verlenv.inside.configlint.kernels import PACKAGES, Kernels
from verlenv.inside.configlint.rules import Finding, _effective, _get, _lookup, _resolve, _where
from verlenv.inside.configlint.schema import VerlSchema
from verlenv.inside.configlint.source import Setting
from verlenv.output import closest

KEY = "attn_implementation"
ALWAYS = frozenset({"eager", "sdpa", "flex_attention"})  # PyTorch's own: nothing to install
KNOWN = ALWAYS | frozenset(PACKAGES)
DEFAULTS = "(verl defaults)"


@dataclass(frozen=True)
class AttnUse:
    """One attn_implementation in effect: the key that holds (or would hold) it, and why it has this value."""

    key: str
    value: str
    location: str
    origin: str
    overridable: bool  # False when no config key changes what verl passes


def findings(
    schema: VerlSchema, cfg: dict[str, Any], settings: list[Setting], kernels: Kernels | None
) -> list[Finding]:
    """Unknown values always; missing kernels only when ``kernels`` says what the environment has."""
    found = []
    for use in in_effect(schema, cfg, settings):
        implementation = use.value.removeprefix("paged|")
        if implementation in PACKAGES:
            if kernels and (lacks := kernels.lacks(implementation)):
                found.append(_missing(schema, use, implementation, lacks, kernels.where))
        elif implementation not in ALWAYS:
            found.append(_unknown(use, implementation))
    return found


def not_checked(schema: VerlSchema, settings: list[Setting]) -> list[str]:
    """The uses that need a kernel, for a lint that cannot see the environment the job runs in."""
    cfg = _effective(schema.tree, [s for s in settings if s.op not in ("~", "yaml-branch")])
    return [
        f"{use.key} is '{use.value}' ({use.origin}): it needs {PACKAGES[use.value.removeprefix('paged|')]}"
        for use in in_effect(schema, cfg, settings)
        if use.value.removeprefix("paged|") in PACKAGES
    ]


def in_effect(schema: VerlSchema, cfg: dict[str, Any], settings: list[Setting]) -> list[AttnUse]:
    """Every model verl will load (the critic only when it runs), and any attn_implementation key verl has."""
    return _model_uses(schema, cfg, settings) + _literal_uses(schema, cfg, settings)


def _model_uses(schema: VerlSchema, cfg: dict[str, Any], settings: list[Setting]) -> list[AttnUse]:
    # The HFModelConfig nodes: actor_rollout_ref.model (actor and reference) and critic.model in 0.9.1.
    models = [".".join(p) for p, node in _walk(cfg) if isinstance(node, dict) and "override_config" in node]
    uses = [_model_use(schema, cfg, settings, m) for m in models if _loaded(cfg, m)]
    return [u for u in uses if u is not None]


def _literal_uses(schema: VerlSchema, cfg: dict[str, Any], settings: list[Setting]) -> list[AttnUse]:
    # Engine configs that carry the key themselves (VeOmni, Automodel); keys verl lacks are the key rule's.
    uses = []
    for path, value in _walk(cfg):
        dotted, value = ".".join(path), _resolve(cfg, value, 0)
        known = _lookup(schema.tree, path)[2] == len(path)
        if (
            path[-1] == KEY
            and "override_config" not in path
            and known
            and isinstance(value, str)
            and _loaded(cfg, dotted)
        ):
            uses.append(AttnUse(dotted, value, _where(settings, dotted), _origin(schema, settings, dotted), True))
    return uses


def _walk(node: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*prefix, str(key)), value
            yield from _walk(value, (*prefix, str(key)))


def _loaded(cfg: dict[str, Any], dotted: str) -> bool:
    """verl's need_critic: critic.enable when set, else only GAE needs one."""
    if dotted.split(".")[0] != "critic":
        return True
    enable = _get(cfg, "critic.enable")
    return enable if isinstance(enable, bool) else _get(cfg, "algorithm.adv_estimator") in ("gae", None)


def _origin(schema: VerlSchema, settings: list[Setting], dotted: str) -> str:
    return "set here" if _where(settings, dotted) != DEFAULTS else f"verl {schema.version}'s default"


def _model_use(schema: VerlSchema, cfg: dict[str, Any], settings: list[Setting], model: str) -> AttnUse | None:
    key, attn = f"{model}.override_config.{KEY}", schema.attention
    chosen, where = _get(cfg, key), _where(settings, key)
    if model.split(".")[0] == "critic" and attn.value_head:
        ignored = f"; {key}={chosen} does not reach it" if isinstance(chosen, str) and chosen != attn.value_head else ""
        origin = (
            f"verl {schema.version} loads the critic's value-head model with {KEY}='{attn.value_head}' itself, "
            f"in verl/utils/model.py load_valuehead_model{ignored}"
        )
        return AttnUse(key, attn.value_head, where, origin, False)
    if attn.default and not attn.overridable:
        origin = f"verl {schema.version} passes {KEY}='{attn.default}' itself, in {attn.source}; override_config does"
        return AttnUse(key, attn.default, where, origin + " not change it", False)
    if isinstance(chosen, str):
        return AttnUse(key, chosen, where, "set here", True)
    if attn.default:
        origin = f"verl {schema.version}'s default when override_config does not set it, {attn.source}"
        return AttnUse(key, attn.default, where, origin, True)
    return None


def _missing(schema: VerlSchema, use: AttnUse, implementation: str, lacks: str, where: str) -> Finding:
    message = f"{use.key} is '{use.value}' ({use.origin}), and {where} cannot run it: {lacks}"
    return Finding("error", use.location, use.key, message, _fix(schema, use, implementation))


def _fix(schema: VerlSchema, use: AttnUse, implementation: str) -> str:
    package, attn = PACKAGES[implementation], schema.attention
    install = f"use an image whose profile brings {package}"
    if package == "flash-attn" and attn.flash_attn_extra:
        install += (
            f", built from its sdist against the profile's torch (verl {schema.version}'s "
            f"[{attn.flash_attn_extra}] extra asks for {attn.flash_attn_pin})"
        )
    if use.overridable:
        return f"{install}; or {_sdpa(use)}"
    if use.key.startswith("critic."):
        return (
            f"{install}; or train without a critic (e.g. algorithm.adv_estimator=grpo, critic.enable unset or false): "
            "no config key reaches verl's value-head loader"
        )
    return f"{install}: no config key changes it in verl {schema.version}"


def _sdpa(use: AttnUse) -> str:
    if use.location != DEFAULTS and not use.location.startswith("override"):
        return f"write sdpa at {use.location}"
    # override_config is a free-form map: Hydra adds a key there only with '+'
    return f"pass {'+' if 'override_config' in use.key else ''}{use.key}=sdpa"


def _unknown(use: AttnUse, implementation: str) -> Finding:
    known = ", ".join(sorted(KNOWN))
    if "/" in implementation:  # a Hub kernel ("kernels-community/flash-attn3"): fetched when the model loads
        message = f"{use.key} is '{use.value}', a Hugging Face Hub kernel: transformers fetches it when the model loads"
        return Finding("warning", use.location, use.key, message, f"on a cluster without the Hub, use one of {known}")
    guess = closest(implementation, KNOWN)
    message = f"{use.key} is '{use.value}', which is none of the attention implementations transformers has ({known})"
    if guess:
        return Finding("error", use.location, use.key, message, f"did you mean '{guess}'?")
    return Finding("warning", use.location, use.key, message, "use sdpa (PyTorch's own) or flash_attention_2")
