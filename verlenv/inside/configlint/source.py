"""The user's side: a YAML file with line numbers, and Hydra-style command-line overrides."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verlenv.errors import ConfigError, require

_OVERRIDE = re.compile(r"^(?P<op>\+\+|\+|~)?(?P<key>[A-Za-z_][\w.\-]*)(?:=(?P<value>.*))?$", re.S)


@dataclass(frozen=True)
class Setting:
    """One key the user sets: its dotted path, value, where it was written, and how (Hydra operator)."""

    path: tuple[str, ...]
    value: Any
    location: str
    op: str = ""  # "" (plain), "+" (add), "++" (add or override), "~" (delete), "yaml"


def read_yaml(path: Path) -> list[Setting]:
    """Leaf settings of a YAML file, each with file:line; Hydra's `defaults` list is skipped."""
    yaml = require("yaml", needed_for="the verl config lint")

    try:
        root = yaml.compose(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ConfigError(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if root is None:
        return []
    if not isinstance(root, yaml.MappingNode):
        raise ConfigError(f"{path}:{root.start_mark.line + 1}: a verl config must be a mapping at the top level")
    return list(_walk(root, (), path))


def _walk(node, prefix: tuple[str, ...], path: Path):  # type: ignore[no-untyped-def]
    yaml = require("yaml", needed_for="the verl config lint")

    for key_node, value_node in node.value:
        key = str(key_node.value)
        if not prefix and key == "defaults":
            continue
        here = (*prefix, key)
        if isinstance(value_node, yaml.MappingNode) and value_node.value:
            yield Setting(here, {}, f"{path}:{key_node.start_mark.line + 1}", "yaml-branch")
            yield from _walk(value_node, here, path)
        else:
            value = yaml.safe_load(yaml.serialize(value_node))
            yield Setting(here, value, f"{path}:{key_node.start_mark.line + 1}", "yaml")


def parse_overrides(items: list[str]) -> list[Setting]:
    yaml = require("yaml", needed_for="the verl config lint")

    settings = []
    for index, text in enumerate(items, start=1):
        match = _OVERRIDE.match(text.strip())
        if not match or (match.group("op") != "~" and match.group("value") is None):
            raise ConfigError(f"override #{index} '{text}': expected key=value, +key=value, ++key=value or ~key")
        raw = match.group("value")
        try:
            value = yaml.safe_load(raw) if raw not in (None, "") else raw
        except yaml.YAMLError:
            value = raw
        settings.append(
            Setting(tuple(match.group("key").split(".")), value, f"override #{index} '{text}'", match.group("op") or "")
        )
    return settings


def collect(inputs: list[str]) -> list[Setting]:
    files = [i for i in inputs if i.endswith((".yaml", ".yml")) and "=" not in i]
    if len(files) > 1:
        raise ConfigError(f"give one YAML file, not {len(files)}: {', '.join(files)}")
    settings = read_yaml(Path(files[0])) if files else []
    return settings + parse_overrides([i for i in inputs if i not in files])
