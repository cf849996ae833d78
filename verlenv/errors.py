"""One exception class per exit code.

Every error that reaches the command line is a :class:`VerlenvError`; its class decides the
process exit code and its message says what went wrong *and what to do*.  The table below is
the single source of truth: README.md and ``verlenv --help`` print it from here.
"""

from __future__ import annotations

import importlib
import textwrap
from types import ModuleType


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


class MissingDependency(ConfigError):
    """An optional package that one command needs is not installed: say which, and the install line."""

    def __init__(self, module: str, *, needed_for: str = "") -> None:
        package, install = OPTIONAL_PACKAGES.get(module.split(".")[0], (module, f"pip install {module}"))
        what = f"{needed_for} needs" if needed_for else "this command needs"
        super().__init__(f"{what} {package} (module '{module}'), which is not installed here", hint=install)
        self.module = module


# import name -> (distribution, the install line that brings it). Commands import these lazily, so
# one command's missing package never stops another (doctor must run in a broken environment).
OPTIONAL_PACKAGES = {
    "elftools": ("pyelftools", "pip install 'pyelftools>=0.29' (a core dependency of verlenv)"),
    "packaging": ("packaging", "pip install 'packaging>=23' (a core dependency of verlenv)"),
    "yaml": ("PyYAML", "pip install 'verlenv[build]' (or pip install PyYAML; verl brings it through omegaconf)"),
    "docker": ("the Docker SDK for Python", "pip install 'verlenv[build]'"),
    "uv": ("uv", "pip install 'verlenv[build]'"),
    "torch": ("torch", "run inside the image, or pip install 'verlenv[accept]' beside the profile's torch"),
    "transformers": ("transformers", "pip install 'verlenv[accept]'"),
    "tokenizers": ("tokenizers", "pip install 'verlenv[accept]'"),
    "peft": ("peft", "pip install 'verlenv[accept]'"),
    "psutil": ("psutil", "pip install 'verlenv[accept]'"),
    "ray": ("Ray", "run it where the cluster's Ray is (every verl image has it), or pip install 'ray[default]'"),
}


def require(module: str, *, needed_for: str = "") -> ModuleType:
    """Import ``module`` or raise MissingDependency (exit 2) naming the package and the install line."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.split(".")[0] == exc.name.split(".")[0]:
            raise MissingDependency(module, needed_for=needed_for) from None
        raise


def as_missing_dependency(exc: ModuleNotFoundError) -> MissingDependency | None:
    """The MissingDependency for an import that failed on a known optional package, else None."""
    top = (exc.name or "").split(".")[0]
    return MissingDependency(exc.name or top) if top in OPTIONAL_PACKAGES else None


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
