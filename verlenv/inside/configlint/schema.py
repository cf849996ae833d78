"""verl's own config, read as YAML from an installed verl or a verl wheel, never by importing verl.

The schema is `verl/trainer/config/_generated_ppo_trainer.yaml` (the fully resolved defaults tree
verl ships since 0.5.0); enum values come from the same release's sources: AdvantageEstimator in
core_algos.py, Tracking.supported_backend in tracking.py, rollout engine names in rollout.yaml; how
it picks the models' attn_implementation from workers/config/model.py (or fsdp_workers.py) and
utils/model.py, and the extra that brings flash-attn from its METADATA.
"""

from __future__ import annotations

import importlib.util
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verlenv.errors import ConfigError, require

GENERATED = "verl/trainer/config/_generated_ppo_trainer.yaml"
_ROLLOUT_NAMES = ("vllm", "sglang", "hf")
_MODEL_SOURCES = ("verl/workers/config/model.py", "verl/workers/fsdp_workers.py")
_VALUE_HEAD_SOURCE = "verl/utils/model.py"
_ATTN = r"[\w|/.-]+"
_QUOTED = rf"""["']({_ATTN})["']"""
# HFModelConfig (0.6+): self.override_config.get("attn_implementation", "flash_attention_2")
_OVERRIDE_GET = re.compile(rf"""override_(?:model_)?config\.get\(\s*["']attn_implementation["']\s*,\s*{_QUOTED}""")
_PASSED = re.compile(rf"attn_implementation\s*=\s*{_QUOTED}")
_FLASH_ATTN_REQ = re.compile(r'^Requires-Dist:\s*flash[-_]attn(?![-_\w])([^;]*);\s*extra\s*==\s*"([^"]+)"', re.M)


@dataclass(frozen=True)
class AttnDefaults:
    """How a verl release picks Hugging Face's attn_implementation for its models, read from its sources."""

    default: str = ""  # what a model gets when override_config does not set it ('' = not found)
    source: str = ""  # the file that decides it
    overridable: bool = True  # False: verl passes `default` itself (0.5); override_config does not reach it
    value_head: str = ""  # passed by the critic's value-head loader whatever the config says ('' = none)
    flash_attn_extra: str = ""  # verl's extra that brings flash-attn: "fsdp" (0.9), "gpu" (0.5-0.8)
    flash_attn_pin: str = ""  # what that extra asks for: "flash-attn==2.8.3"


@dataclass(frozen=True)
class VerlSchema:
    version: str
    source: str
    tree: dict[str, Any]
    adv_estimators: frozenset[str] = field(default_factory=frozenset)
    loggers: frozenset[str] = field(default_factory=frozenset)
    rollout_names: frozenset[str] = field(default_factory=frozenset)
    attention: AttnDefaults = field(default_factory=AttnDefaults)


class _Files:
    """verl's files, from a wheel or from an installed package directory."""

    def __init__(self, wheel: Path | None = None, package: Path | None = None) -> None:
        self.wheel, self.package = wheel, package

    def read(self, rel: str) -> str | None:
        if self.wheel is not None:
            with zipfile.ZipFile(self.wheel) as archive:
                try:
                    return archive.read(rel).decode("utf-8", "replace")
                except KeyError:
                    return None
        path = self.package.parent / rel if self.package else None
        return path.read_text(errors="replace") if path and path.exists() else None

    def version(self) -> str:
        if self.wheel is not None:
            return self.wheel.name.split("-")[1]
        from importlib.metadata import version

        return version("verl")

    def metadata(self) -> str:
        if self.wheel is not None:
            with zipfile.ZipFile(self.wheel) as archive:
                name = next((n for n in archive.namelist() if n.endswith(".dist-info/METADATA")), None)
                return archive.read(name).decode("utf-8", "replace") if name else ""
        from importlib.metadata import PackageNotFoundError, distribution

        try:
            return distribution("verl").read_text("METADATA") or ""
        except PackageNotFoundError:
            return ""


def load_schema(wheel: Path | None = None) -> VerlSchema:
    """From ``wheel`` when given, else from the verl installed in this environment."""
    yaml = require("yaml", needed_for="the verl config lint")

    files = _Files(wheel=wheel) if wheel else _Files(package=_installed_package())
    text = files.read(GENERATED)
    version = files.version()
    if text is None:
        raise ConfigError(f"verl {version} has no {GENERATED}", hint="lint-config supports verl >= 0.5.0")
    return VerlSchema(
        version=version,
        source=str(wheel) if wheel else f"installed verl {version}",
        tree=yaml.safe_load(text),
        adv_estimators=_adv_estimators(files.read("verl/trainer/ppo/core_algos.py") or ""),
        loggers=_loggers(files.read("verl/utils/tracking.py") or ""),
        rollout_names=_rollout_names(files.read("verl/trainer/config/rollout/rollout.yaml") or ""),
        attention=_attention(files),
    )


def _installed_package() -> Path:
    spec = importlib.util.find_spec("verl")  # locates the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("verl is not installed here", hint="pass --verl-wheel PATH or --verl-version X.Y.Z")
    return Path(next(iter(spec.submodule_search_locations)))


def _adv_estimators(source: str) -> frozenset[str]:
    body = re.search(r"class AdvantageEstimator\(.*?\):(.*?)\n(?:class |def |@)", source, re.S)
    return frozenset(re.findall(r'^\s+[A-Z_]+\s*=\s*"([a-z_]+)"', body.group(1), re.M)) if body else frozenset()


def _loggers(source: str) -> frozenset[str]:
    block = re.search(r"supported_backend\s*=\s*\[(.*?)\]", source, re.S)
    names = set(re.findall(r'"([a-z_]+)"', block.group(1))) if block else set()
    return frozenset(names | ({"tracking"} if '"tracking"' in source else set()))


def _rollout_names(source: str) -> frozenset[str]:
    match = re.search(r"rollout\.name:\s*([a-z/]+)", source)
    return frozenset(match.group(1).split("/")) if match else frozenset(_ROLLOUT_NAMES)


def _attention(files: _Files) -> AttnDefaults:
    value_head = _value_head(files.read(_VALUE_HEAD_SOURCE) or "")
    extra, pin = _flash_attn_extra(files.metadata())
    sources = {rel: files.read(rel) or "" for rel in _MODEL_SOURCES}
    for rel, text in sources.items():
        if match := _OVERRIDE_GET.search(text):
            return AttnDefaults(match.group(1), rel, True, value_head, extra, pin)
    workers = _MODEL_SOURCES[1]
    if match := _PASSED.search(sources[workers]):  # verl 0.5: passed as a literal, override_config not consulted
        return AttnDefaults(match.group(1), workers, False, value_head, extra, pin)
    return AttnDefaults(value_head=value_head, flash_attn_extra=extra, flash_attn_pin=pin)


def _value_head(source: str) -> str:
    body = re.search(r"def load_valuehead_model\(.*?(?=\ndef |\Z)", source, re.S)
    match = _PASSED.search(body.group(0)) if body else None
    return match.group(1) if match else ""


def _flash_attn_extra(metadata: str) -> tuple[str, str]:
    """("fsdp", "flash-attn==2.8.3"): 0.9 pins flash-attn in a per-CUDA extra that [fsdp] pulls in, so the
    extra to name is the one that requires that one."""
    match = _FLASH_ATTN_REQ.search(metadata)
    if not match:
        return "", ""
    pin, extra = match.group(1).strip(), match.group(2)
    pulls = rf'^Requires-Dist:\s*verl\[[^\]]*\b{re.escape(extra)}\b[^\]]*\];\s*extra\s*==\s*"([^"]+)"'
    outer = re.search(pulls, metadata, re.M)
    return (outer.group(1) if outer else extra), f"flash-attn{pin}"
