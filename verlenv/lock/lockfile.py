"""Reading and writing lockfiles/NAME.lock (core: used inside containers too).

A lock is uv's requirements output (one ``name==version`` per entry, each with ``--hash=``
lines) under a header that records what it was made from, so staleness can be told offline.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from verlenv.errors import ConfigError

LOCK_SCHEMA_VERSION = 1
_HEADER_LINE = re.compile(r"^# ([a-z0-9-]+): (.*)$")
HEADER_KEYS = ("lock-schema", "profile", "profile-sha256", "uv-version", "python", "platform", "exclude-newer")
_HASH = re.compile(r"^--hash=sha256:([0-9a-f]{64})$")


@dataclass(frozen=True)
class LockHeader:
    profile: str
    profile_sha256: str
    uv_version: str
    python: str
    platform: str
    exclude_newer: str

    def render(self) -> str:
        values = (
            str(LOCK_SCHEMA_VERSION),
            self.profile,
            self.profile_sha256,
            self.uv_version,
            self.python,
            self.platform,
            self.exclude_newer,
        )
        lines = ["# This file is written by `verlenv lock`; edit the profile, not this file."]
        lines += [f"# {key}: {value}" for key, value in zip(HEADER_KEYS, values, strict=True)]
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class LockedDist:
    name: str
    version: str
    hashes: tuple[str, ...]
    marker: str = ""

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class Lock:
    header: LockHeader
    dists: tuple[LockedDist, ...]
    sha256: str

    def version_of(self, name: str) -> str | None:
        wanted = canonicalize_name(name)
        return next((d.version for d in self.dists if d.name == wanted), None)


def read_lock(path: Path) -> Lock:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: lock not found", hint="create it with `verlenv lock --profile NAME`") from None
    return parse_lock(text, path)


def parse_lock(text: str, path: Path) -> Lock:
    return Lock(
        header=parse_header(text, path),
        dists=parse_entries(text, path),
        sha256=hashlib.sha256(text.encode()).hexdigest(),
    )


def parse_header(text: str, path: Path) -> LockHeader:
    found: dict[str, str] = {}
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        match = _HEADER_LINE.match(line)
        if match and match.group(1) in HEADER_KEYS:
            found[match.group(1)] = match.group(2).strip()
    missing = [key for key in HEADER_KEYS if key not in found]
    if missing:
        raise ConfigError(f"{path}: lock header lacks {', '.join(missing)}", hint="regenerate it with `verlenv lock`")
    if found["lock-schema"] != str(LOCK_SCHEMA_VERSION):
        raise ConfigError(
            f"{path}: lock-schema {found['lock-schema']} is not {LOCK_SCHEMA_VERSION}; regenerate the lock"
        )
    return LockHeader(
        profile=found["profile"],
        profile_sha256=found["profile-sha256"],
        uv_version=found["uv-version"],
        python=found["python"],
        platform=found["platform"],
        exclude_newer=found["exclude-newer"],
    )


def parse_entries(text: str, path: Path) -> tuple[LockedDist, ...]:
    """Every requirement entry; an entry without a sha256 hash or an exact pin is an error."""
    return tuple(_parse_entry(line, path) for line in _logical_lines(text))


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if current and not raw[:1].isspace() and not stripped.startswith("--"):
            lines.append(current.strip())  # a dangling "\\" before the next entry (hash lines deleted)
            current = ""
        current += " " + stripped.removesuffix("\\")
        if not stripped.endswith("\\"):
            lines.append(current.strip())
            current = ""
    if current.strip():
        lines.append(current.strip())
    return lines


def _parse_entry(line: str, path: Path) -> LockedDist:
    head, _, _ = line.partition(" --")
    options = line[len(head) :].split()
    try:
        requirement = Requirement(head.strip())
    except InvalidRequirement as exc:
        raise ConfigError(f"{path}: cannot parse lock entry '{head.strip()}': {exc}") from None
    pins = [s for s in requirement.specifier if s.operator in ("==", "===")]
    if len(pins) != 1 or len(requirement.specifier) != 1:
        raise ConfigError(f"{path}: lock entry '{head.strip()}' is not pinned to one exact version")
    hashes = []
    for option in options:
        match = _HASH.match(option)
        if not match:
            raise ConfigError(f"{path}: lock entry '{requirement.name}' has an unexpected option '{option}'")
        hashes.append(match.group(1))
    if not hashes:
        raise ConfigError(
            f"{path}: lock entry '{requirement.name}=={pins[0].version}' has no --hash=sha256",
            hint="every locked file must be hashed; regenerate with `verlenv lock`",
        )
    return LockedDist(
        name=canonicalize_name(requirement.name),
        version=pins[0].version,
        hashes=tuple(hashes),
        marker=str(requirement.marker or ""),
    )
