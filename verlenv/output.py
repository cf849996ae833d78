"""Small helpers for human tables and versioned JSON on stdout."""

from __future__ import annotations

import json
from collections.abc import Sequence
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
