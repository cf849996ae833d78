"""What the user reads: human tables, versioned JSON on stdout, and 'did you mean ...' hints."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

JSON_SCHEMA_VERSION = 1


def print_json(payload: dict[str, Any]) -> None:
    print(json.dumps({"schema_version": JSON_SCHEMA_VERSION, **payload}, indent=2, sort_keys=True))


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(c)) for c in column) for column in zip(headers, *rows, strict=False)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(headers, widths, strict=False)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in rows]
    return "\n".join(lines)


def camel_to_snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def closest(name: str, choices: Iterable[str]) -> str | None:
    """Best guess for ``name`` among ``choices``: case-insensitive and camelCase first, then spelling."""
    options = list(choices)
    for candidate in (name.lower(), camel_to_snake(name), name.replace("-", "_"), name.replace("_", "-")):
        for option in options:
            if option.lower() == candidate.lower():
                return option
    tokens = [t for t in re.split(r"[_.\-]+", camel_to_snake(name)) if t]
    by_lower = {option.lower(): option for option in options}
    for token in tokens:  # "Cuda_Version" -> "cuda"
        if token in by_lower:
            return by_lower[token]
    for word in (name, *tokens):  # whole name first, then its parts: "pyhton_tag" -> "python"
        matches = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.75)
        if matches:
            return by_lower[matches[0]]
    return None


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """A hint sentence, or '' when nothing is close."""
    guess = closest(name, choices)
    return f"did you mean '{guess}'?" if guess else ""
