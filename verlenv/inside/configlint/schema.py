"""verl's own config, read as YAML from an installed verl or a verl wheel, never by importing verl.

The schema is `verl/trainer/config/_generated_ppo_trainer.yaml` (the fully resolved defaults tree
verl ships since 0.5.0); enum values come from the same release's sources: AdvantageEstimator in
core_algos.py, Tracking.supported_backend in tracking.py, rollout engine names in rollout.yaml.
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


@dataclass(frozen=True)
class VerlSchema:
    version: str
    source: str
    tree: dict[str, Any]
    adv_estimators: frozenset[str] = field(default_factory=frozenset)
    loggers: frozenset[str] = field(default_factory=frozenset)
    rollout_names: frozenset[str] = field(default_factory=frozenset)


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
