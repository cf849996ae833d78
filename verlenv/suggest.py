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
