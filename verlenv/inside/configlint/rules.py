"""The lint rules: unknown and invented keys, `+` keys verl never reads, types, enums, missing
engines and logger prerequisites, and the batch-size divisibility verl asserts at start-up; the
attention implementations in effect are attention.py's."""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verlenv.errors import require
from verlenv.inside.configlint.kernels import Kernels, here
from verlenv.inside.configlint.schema import VerlSchema
from verlenv.inside.configlint.source import Setting
from verlenv.output import closest

MISSING = "???"

# Keys that circulate in "verl tips" but exist in no verl release (field-notes §9), with the truth.
INVENTED = {
    "global_reward_norm": "no verl release has it; verl already whitens GAE advantages over the whole step batch on "
    "the driver, and for GRPO the switch is algorithm.norm_adv_by_std_in_grpo",
    "reward_norm": "no verl release has a reward normalization key; see algorithm.norm_adv_by_std_in_grpo",
    "log_interval": "verl logs every step; the real knobs are trainer.test_freq, trainer.save_freq and "
    "trainer.log_val_generations",
    "report_interval": "verl logs every step; the real knobs are trainer.test_freq and trainer.save_freq",
}
ROLLOUT_NAME = ("actor_rollout_ref", "rollout", "name")
ADV_ESTIMATOR = ("algorithm", "adv_estimator")
LOGGER = ("trainer", "logger")


@dataclass(frozen=True)
class Finding:
    severity: str  # error | warning
    location: str
    key: str
    message: str
    fix: str


def lint(
    schema: VerlSchema, settings: list[Setting], *, installed: bool, kernels: Kernels | None = None
) -> list[Finding]:
    """``installed``: the lint runs in the job's environment (engines and kernels are checked here);
    ``kernels``: what another environment offers (a site, a manifest, a lock) when it does not."""
    from verlenv.inside.configlint import attention  # it builds on this module's helpers

    found: list[Finding] = []
    for setting in settings:
        found += _key_findings(schema, setting)
    known = [s for s in settings if _lookup(schema.tree, s.path)[0] and s.op not in ("~", "yaml-branch")]
    for setting in known:
        found += _type_findings(schema, setting) + _enum_findings(schema, setting, installed)
    effective = _effective(schema.tree, [s for s in settings if s.op not in ("~", "yaml-branch")])
    found += _logger_findings(schema, effective, settings) + _batch_findings(effective, settings)
    found += attention.findings(schema, effective, settings, kernels or (here() if installed else None))
    return _dedupe(found)


def _dedupe(found: list[Finding]) -> list[Finding]:
    return list(dict.fromkeys(found))


def _lookup(tree: Any, path: tuple[str, ...]) -> tuple[bool, Any, int]:
    """(found, value, depth of the first missing component); free-form maps accept any subkey."""
    node = tree
    for depth, key in enumerate(path):
        if not isinstance(node, dict):
            return node is None or node == {}, None, depth
        if key not in node:
            return node == {} or _is_free_form(node), None, depth
        node = node[key]
    return True, node, len(path)


def _is_free_form(node: dict[str, Any]) -> bool:
    # kwargs-style maps with no fixed fields (verl declares them as {} or null)
    return not node


def _key_findings(schema: VerlSchema, setting: Setting) -> list[Finding]:
    found, _, depth = _lookup(schema.tree, setting.path)
    dotted = ".".join(setting.path)
    if found:
        return _operator_findings(setting, dotted, exists=depth == len(setting.path))
    if setting.op == "yaml-branch" and depth < len(setting.path) - 1:
        return []  # reported at its own level
    bad = setting.path[depth]
    parent = ".".join(setting.path[:depth]) or "(top level)"
    invented = INVENTED.get(bad)
    if invented:
        return [
            Finding(
                "error",
                setting.location,
                dotted,
                f"'{bad}' does not exist in verl {schema.version}: {invented}",
                f"remove {dotted}",
            )
        ]
    siblings = _children(schema.tree, setting.path[:depth])
    guess = closest(bad, siblings)
    fix = f"did you mean '{'.'.join((*setting.path[:depth], guess))}'?" if guess else f"see the keys under {parent}"
    how = {
        "": "Hydra will refuse this override ('Could not override')",
        "+": "Hydra adds it silently and verl never reads it",
        "++": "Hydra adds it silently and verl never reads it",
        "~": "there is nothing to delete",
    }.get(setting.op, "verl accepts it silently and never reads it")
    return [
        Finding(
            "error",
            setting.location,
            dotted,
            f"unknown key '{bad}' under {parent} in verl {schema.version}: {how}",
            fix,
        )
    ]


def _operator_findings(setting: Setting, dotted: str, exists: bool) -> list[Finding]:
    """A key verl's config has must be set plainly; a new key under a free-form map (engine_kwargs.sglang,
    override_config) must be added with '+': Hydra's struct mode refuses the other way round."""
    if exists and setting.op == "+":
        message = f"'{dotted}' already exists in verl's config; Hydra refuses '+' for an existing key"
        return [Finding("error", setting.location, dotted, message, f"write {dotted}=... (or ++{dotted}=...)")]
    if not exists and setting.op == "":
        message = f"'{dotted}' is a new key under a free-form map; Hydra refuses to override a key that is not there"
        return [Finding("error", setting.location, dotted, message, f"write +{dotted}=...")]
    return []


def _children(tree: Any, path: tuple[str, ...]) -> list[str]:
    node = tree
    for key in path:
        node = node.get(key, {}) if isinstance(node, dict) else {}
    return list(node) if isinstance(node, dict) else []


def _type_of(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "map"
    return "null"


def _type_findings(schema: VerlSchema, setting: Setting) -> list[Finding]:
    _, default, _ = _lookup(schema.tree, setting.path)
    value = setting.value
    if default is None or default == MISSING or _interpolated(default) or _interpolated(value) or value is None:
        return []
    if setting.path == LOGGER and isinstance(value, (str, list)):
        return []
    want, got = _type_of(default), _type_of(value)
    ok = want == got or (want == "float" and got == "int") or (want == "map" and got == "map")
    if ok:
        return []
    dotted = ".".join(setting.path)
    return [
        Finding(
            "error",
            setting.location,
            dotted,
            f"'{dotted}' is {got} {value!r}; verl expects {want} (default {default!r})",
            f"write a {want}, e.g. {dotted}={default!r}",
        )
    ]


def _interpolated(value: Any) -> bool:
    return isinstance(value, str) and "${" in value


def _enum_findings(schema: VerlSchema, setting: Setting, installed: bool) -> list[Finding]:
    dotted, value = ".".join(setting.path), setting.value
    if setting.path == ROLLOUT_NAME and isinstance(value, str):
        return _rollout_name(schema, setting, dotted, value, installed)
    if setting.path == ADV_ESTIMATOR and schema.adv_estimators and isinstance(value, str):
        return _choice(schema.adv_estimators, value, setting, dotted, schema.version)
    if setting.path == LOGGER and schema.loggers:
        values = [value] if isinstance(value, str) else list(value or [])
        return [f for v in values for f in _choice(schema.loggers, str(v), setting, dotted, schema.version)]
    return []


def _choice(allowed: frozenset[str], value: str, setting: Setting, dotted: str, version: str) -> list[Finding]:
    if value in allowed:
        return []
    guess = closest(value, allowed)
    hint = f"did you mean '{guess}'?" if guess else f"one of: {', '.join(sorted(allowed))}"
    return [Finding("error", setting.location, dotted, f"{dotted}: verl {version} does not accept '{value}'", hint)]


def _rollout_name(schema: VerlSchema, setting: Setting, dotted: str, value: str, installed: bool) -> list[Finding]:
    found = _choice(schema.rollout_names, value, setting, dotted, schema.version)
    if found or not installed or value == "hf":
        return found
    module = {"vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt_llm"}.get(value, value)
    if importlib.util.find_spec(module) is None:
        return [
            Finding(
                "error",
                setting.location,
                dotted,
                f"rollout engine '{value}' is not installed in this environment",
                f"use an image whose profile includes {value}, or rollout.name=hf",
            )
        ]
    return []


def _effective(tree: dict[str, Any], settings: list[Setting]) -> dict[str, Any]:
    """verl's defaults with the user's values laid over them (no interpolation yet)."""
    import copy

    merged = copy.deepcopy(tree)
    for setting in settings:
        node = merged
        for key in setting.path[:-1]:
            node = node.setdefault(key, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node[setting.path[-1]] = setting.value
    return merged


def _get(tree: dict[str, Any], dotted: str, depth: int = 0) -> Any:
    node: Any = tree
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return _resolve(tree, node, depth)


def _resolve(tree: dict[str, Any], value: Any, depth: int) -> Any:
    """The two interpolation forms verl's generated config uses: ${a.b} and ${oc.select:a.b,default}."""
    if not isinstance(value, str) or depth > 5:
        return value
    match = re.fullmatch(r"\$\{oc\.select:([\w.]+)(?:,(.*))?\}", value)
    if match:
        found = _get(tree, match.group(1), depth + 1)
        if found is not None:
            return found
        yaml = require("yaml", needed_for="the verl config lint")

        return yaml.safe_load(match.group(2)) if match.group(2) not in (None, "") else None
    match = re.fullmatch(r"\$\{([\w.]+)\}", value)
    return _get(tree, match.group(1), depth + 1) if match else value


def _where(settings: list[Setting], *keys: str) -> str:
    for setting in reversed(settings):
        if ".".join(setting.path) in keys:
            return setting.location
    return "(verl defaults)"


def _batch_findings(cfg: dict[str, Any], settings: list[Setting]) -> list[Finding]:
    tbs, n = _get(cfg, "data.train_batch_size"), _get(cfg, "actor_rollout_ref.rollout.n")
    per_node, nodes = _get(cfg, "trainer.n_gpus_per_node"), _get(cfg, "trainer.nnodes")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (tbs, n, per_node, nodes)):
        return []
    gpus = per_node * nodes
    found = []
    where = _where(
        settings, "data.train_batch_size", "actor_rollout_ref.rollout.n", "trainer.n_gpus_per_node", "trainer.nnodes"
    )
    if (tbs * n) % gpus:
        found.append(
            Finding(
                "error",
                where,
                "data.train_batch_size",
                f"train_batch_size x rollout.n = {tbs * n} is not "
                f"divisible by {gpus} GPUs (n_gpus_per_node x nnodes): verl asserts this at start-up",
                f"make {tbs}x{n} a multiple of {gpus}",
            )
        )
    for role in ("actor_rollout_ref.actor", "critic"):
        if role == "critic" and _get(cfg, "algorithm.adv_estimator") not in ("gae", None):
            continue
        found += _minibatch(cfg, settings, role, tbs, n, gpus)
    return found


def _minibatch(cfg, settings, role: str, tbs: int, n: int, gpus: int) -> list[Finding]:  # type: ignore[no-untyped-def]
    mini, micro = _get(cfg, f"{role}.ppo_mini_batch_size"), _get(cfg, f"{role}.ppo_micro_batch_size_per_gpu")
    if _get(cfg, f"{role}.use_dynamic_bsz") is True or not isinstance(mini, int) or isinstance(mini, bool):
        return []
    where = _where(
        settings, f"{role}.ppo_mini_batch_size", f"{role}.ppo_micro_batch_size_per_gpu", "data.train_batch_size"
    )
    if tbs < mini:
        return [
            Finding(
                "error",
                where,
                f"{role}.ppo_mini_batch_size",
                f"train_batch_size ({tbs}) must be >= {role}.ppo_mini_batch_size ({mini}): verl refuses to start",
                "lower the mini-batch size",
            )
        ]
    per_gpu, rest = divmod(mini * n, gpus)
    if rest:
        return [
            Finding(
                "error",
                where,
                f"{role}.ppo_mini_batch_size",
                f"ppo_mini_batch_size x rollout.n = {mini * n} does not split over {gpus} GPUs",
                f"make {mini}x{n} a multiple of {gpus}",
            )
        ]
    if isinstance(micro, int) and not isinstance(micro, bool) and micro > 0 and per_gpu % micro:
        return [
            Finding(
                "error",
                where,
                f"{role}.ppo_micro_batch_size_per_gpu",
                f"each GPU's mini-batch share "
                f"({mini}x{n}/{gpus} = {per_gpu}) is not divisible by ppo_micro_batch_size_per_gpu ({micro})",
                f"pick a micro-batch size that divides {per_gpu}",
            )
        ]
    return []


def _logger_findings(schema: VerlSchema, cfg: dict[str, Any], settings: list[Setting]) -> list[Finding]:
    value = _get(cfg, "trainer.logger")
    loggers = [value] if isinstance(value, str) else [str(v) for v in (value or [])]
    where = _where(settings, "trainer.logger")
    found = []
    if ("wandb" in loggers or "tracking" in loggers) and not _wandb_ready():
        found.append(
            Finding(
                "warning",
                where,
                "trainer.logger",
                "the wandb logger is on, but WANDB_API_KEY is not set "
                "and WANDB_MODE is not offline: the run will stop to ask for a login, or fail",
                "export WANDB_API_KEY=... (or WANDB_MODE=offline), or drop wandb from trainer.logger",
            )
        )
    if "file" in loggers and not (os.environ.get("VERL_FILE_LOGGER_PATH") or os.environ.get("VERL_FILE_LOGGER_ROOT")):
        found.append(
            Finding(
                "warning",
                where,
                "trainer.logger",
                "the file logger writes <project>/<experiment>.jsonl "
                "under the working directory (VERL_FILE_LOGGER_ROOT defaults to '.'), which on a cluster "
                "is often a node-local or read-only path",
                "export VERL_FILE_LOGGER_ROOT=/shared/path",
            )
        )
    return found


def _wandb_ready() -> bool:
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_MODE", "").lower() in ("offline", "disabled"):
        return True
    netrc = Path.home() / ".netrc"
    return netrc.exists() and "api.wandb.ai" in netrc.read_text(errors="replace")
