"""Strict checking of TOML tables: unknown keys, missing keys and wrong types name file and key."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verlenv.errors import ConfigError
from verlenv.output import did_you_mean

_TYPE_NAMES = {str: "a string", bool: "true or false", int: "an integer", list: "an array", dict: "a table"}


@dataclass(frozen=True)
class Field:
    kind: type
    required: bool = False
    item: type | None = None  # element type for arrays


def type_name(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, float):
        return f"a float ({value!r})"
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def load_toml(path: Path) -> dict[str, Any]:
    import tomllib  # host side only (Python 3.11+); container-side verlenv never reads TOML

    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def check_table(table: dict[str, Any], fields: dict[str, Field], path: Path, where: str = "") -> None:
    """Raise ConfigError for the first unknown, missing or mistyped key in ``table``."""
    prefix = f"{where}." if where else ""
    for key in table:
        if key not in fields:
            raise ConfigError(
                f"{path}: unknown key '{prefix}{key}'",
                hint=did_you_mean(key, fields) or f"allowed keys here: {', '.join(sorted(fields))}",
            )
    for key, field in fields.items():
        if key not in table:
            if field.required:
                raise ConfigError(f"{path}: missing required key '{prefix}{key}'")
            continue
        _check_type(table[key], field, path, f"{prefix}{key}")


def _check_type(value: Any, field: Field, path: Path, key: str) -> None:
    ok = isinstance(value, field.kind) and not (field.kind is int and isinstance(value, bool))
    if not ok:
        hint = f'write it as a quoted string: {key.rsplit(".", 1)[-1]} = "{value}"' if field.kind is str else ""
        raise ConfigError(f"{path}: key '{key}' must be {_TYPE_NAMES[field.kind]}, not {type_name(value)}", hint=hint)
    if field.item is not None:
        for index, element in enumerate(value):
            if not isinstance(element, field.item):
                raise ConfigError(
                    f"{path}: '{key}[{index}]' must be {_TYPE_NAMES[field.item]}, not {type_name(element)}"
                )
