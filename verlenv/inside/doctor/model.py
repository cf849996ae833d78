"""Results, checks and the facts every check may use."""

from __future__ import annotations

import enum
import sysconfig
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from verlenv.image.manifest import Manifest, load_manifest, manifest_path
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
        start_probe: bool = False,
        write_elf_cache: bool = False,
    ) -> None:
        self.site = site or Path(sysconfig.get_paths()["purelib"])
        self.config = config or []  # a verl YAML and/or overrides, from --config
        self._manifest_file = manifest_file
        self.write_elf_cache = write_elf_cache  # record the ELF scan beside the manifest (build, venv)
        self.root = root
        self.probe_timeout = probe_timeout
        self._probe_lock = threading.Lock()
        self._probe: dict[str, object] | None = None
        self._probe_proc = None
        if start_probe:  # the slowest fact: start it before any check runs
            from verlenv.inside.doctor.probe import start_probe as start

            self._probe_proc = start()

    @cached_property
    def manifest(self) -> Manifest | None:
        return load_manifest(self._manifest_file)

    @cached_property
    def manifest_file(self) -> Path | None:
        """The manifest's path when there is one: records of this environment live beside it."""
        path = self._manifest_file or manifest_path()
        return path if path.is_file() else None

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

    @property
    def probe(self) -> dict[str, object]:
        """The import probe's findings; several checks ask for it at once, it runs once."""
        with self._probe_lock:
            if self._probe is None:
                from verlenv.inside.doctor.probe import finish_probe, start_probe

                proc, self._probe_proc = self._probe_proc or start_probe(), None
                self._probe = finish_probe(proc, self.probe_timeout)
            return self._probe


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    run: Callable[[Facts], Result] = field(repr=False)
    static: bool = True  # runs at build time (no GPU, no runtime-only facts such as /dev/shm)
    uses_probe: bool = False  # needs the import probe (a subprocess that imports torch)
