"""Results, checks and the facts every check may use."""

from __future__ import annotations

import enum
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from verlenv.image.manifest import Manifest, load_manifest
from verlenv.inside.installed import Installed, with_lent


class Status(str, enum.Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"
    CRASHED = "crashed"


@dataclass(frozen=True)
class Result:
    status: Status
    summary: str
    details: tuple[str, ...] = ()
    fix: str = ""


@dataclass(frozen=True)
class Outcome:
    """A check's result as reported: the Result plus the check's identity and timing."""

    id: str
    title: str
    result: Result
    seconds: float


class Facts:
    """Lazily computed facts about the environment, shared by the checks of one run."""

    def __init__(
        self,
        site: Path | None = None,
        manifest_file: Path | None = None,
        root: Path = Path("/"),
        probe_timeout: float = 60.0,
        config: list[str] | None = None,
    ) -> None:
        self.site = site or Path(sysconfig.get_paths()["purelib"])
        self.config = config or []  # a verl YAML and/or overrides, from --config
        self._manifest_file = manifest_file
        self.root = root
        self.probe_timeout = probe_timeout

    @cached_property
    def manifest(self) -> Manifest | None:
        return load_manifest(self._manifest_file)

    @cached_property
    def lent(self) -> dict[str, Path]:
        """Distributions a venv reuses from another interpreter's site-packages (name -> that site)."""
        reused = self.manifest.reused if self.manifest else {}
        return {name: Path(info["site"]) for name, info in reused.items()}

    @cached_property
    def installed(self) -> dict[str, Installed]:
        return with_lent(self.site, self.lent)

    @cached_property
    def dists(self) -> dict[str, str]:
        return {name: dist.version for name, dist in self.installed.items()}

    @cached_property
    def probe(self) -> dict[str, object]:
        from verlenv.inside.doctor.probe import run_probe

        return run_probe(self.probe_timeout)


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    run: Callable[[Facts], Result] = field(repr=False)
    static: bool = True  # runs at build time (no GPU, no runtime-only facts such as /dev/shm)
