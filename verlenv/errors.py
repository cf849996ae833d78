"""One exception class per exit code.

Every error that reaches the command line is a :class:`VerlenvError`; its class decides the
process exit code and its message says what went wrong *and what to do*.  The table below is
the single source of truth: README.md and ``verlenv --help`` print it from here.
"""

from __future__ import annotations

import textwrap


class VerlenvError(Exception):
    """Base class: a failure we expected and can explain."""

    exit_code = 3
    label = "internal error"

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.message = textwrap.dedent(message).strip()
        self.hint = textwrap.dedent(hint).strip()

    def render(self) -> str:
        text = f"error: {self.message}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text


class CheckFailed(VerlenvError):
    """A check ran and found a problem (stale lock, ABI mismatch, failed doctor check)."""

    exit_code = 1
    label = "a check failed"


class ConfigError(VerlenvError):
    """Bad command-line usage or a bad input file (profile, bases.toml, lock)."""

    exit_code = 2
    label = "usage or configuration error"


class InternalError(VerlenvError):
    """verlenv itself crashed; the traceback is printed."""

    exit_code = 3
    label = "internal error (a bug in verlenv: please report it)"


class ResolutionError(VerlenvError):
    """The resolver or another external tool (uv, pip) failed or returned unusable output."""

    exit_code = 4
    label = "resolver or external tool failed"


class ServiceError(VerlenvError):
    """A service we need (Docker engine, registry) is missing or not answering."""

    exit_code = 5
    label = "service unavailable (Docker engine, registry)"


class IntegrityError(VerlenvError):
    """A file's content does not match the hash recorded for it."""

    exit_code = 6
    label = "integrity failure (hash mismatch)"


EXIT_OK = 0
ERROR_CLASSES: tuple[type[VerlenvError], ...] = (
    CheckFailed,
    ConfigError,
    InternalError,
    ResolutionError,
    ServiceError,
    IntegrityError,
)


def exit_code_table() -> list[tuple[int, str]]:
    """(code, meaning) rows, code 0 first, for --help and the README."""
    rows = [(EXIT_OK, "success")]
    rows += [(cls.exit_code, cls.label) for cls in ERROR_CLASSES]
    return sorted(rows)
