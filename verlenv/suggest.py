"""'Did you mean ...' for misspelt keys and names."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable


def camel_to_snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def closest(name: str, choices: Iterable[str]) -> str | None:
    """Best guess for ``name`` among ``choices``: case-insensitive and camelCase first, then spelling."""
    options = list(choices)
    for candidate in (name.lower(), camel_to_snake(name), name.replace("-", "_"), name.replace("_", "-")):
        for option in options:
            if option.lower() == candidate.lower():
                return option
    matches = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    return matches[0] if matches else None


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """A hint sentence, or '' when nothing is close."""
    guess = closest(name, choices)
    return f"did you mean '{guess}'?" if guess else ""
