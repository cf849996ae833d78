"""Profiles: images/profiles/NAME.toml, one torch / engine / verl combination each.

A profile is what the user wants; the lock is what the resolver made of it.  Loading is strict:
any unknown key, wrong type or impossible version is a ConfigError (exit 2) naming file and key.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from verlenv.errors import ConfigError
from verlenv.output import did_you_mean
from verlenv.paths import ProjectPaths
from verlenv.profiles.bases import Base, load_bases
from verlenv.profiles.schema import Field, check_table, load_toml

SCHEMA_VERSION = 1
# "torch-extras" holds what the torch patterns match but torch itself does not need (torchvision,
# CUDA compilers, ...): the torch layer stays the same across profiles that lock the same torch.
LAYER_ORDER = ("torch", "torch-extras", "engine", "deps", "verl", "verlenv")
DECLARED_LAYERS = ("torch", "engine", "verl")  # "deps" takes the rest, "verlenv" is always last
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_PLATFORM = re.compile(r"^(x86_64|aarch64)-manylinux_2_(\d+)$")
_PYTHON = re.compile(r"^3\.(\d+)$")
_CUDA = re.compile(r"^\d+\.\d+$")

PROFILE_FIELDS = {
    "schema_version": Field(int, required=True),
    "description": Field(str, required=True),
    "default": Field(bool),
    "python": Field(str, required=True),
    "platform": Field(str, required=True),
    "cuda": Field(str, required=True),
    "base": Field(str, required=True),
    "snapshot": Field(str, required=True),
    "snapshot_why": Field(str, required=True),
    "engine": Field(str, required=True),
    "components": Field(dict, required=True),
    "requirements": Field(list, required=True, item=dict),
    "layers": Field(dict, required=True),
    "sources": Field(dict),
    "waivers": Field(list, item=dict),
    "overrides": Field(list, item=dict),
    "builds": Field(list, item=dict),
}
ENGINES = ("vllm", "sglang", "none")  # the rollout engine an image is for
WAIVER_FIELDS = {"object": Field(str, required=True), "why": Field(str, required=True)}
REQUIREMENT_FIELDS = {"spec": Field(str, required=True), "why": Field(str, required=True)}
LAYER_FIELDS = {name: Field(list, item=str) for name in DECLARED_LAYERS}
BUILD_FIELDS = {
    "name": Field(str, required=True),
    "version": Field(str, required=True),
    "cuda_archs": Field(list, required=True, item=str),  # [] for a C++-only extension
    "requires": Field(list, item=str),
    "env": Field(list, item=str),
    "why": Field(str, required=True),
}
_ARCH = re.compile(r"^\d{2,3}a?$")
SOURCE_FIELDS = {
    "pip_download": Field(list, item=str),
    "find_links": Field(list, item=str),
    "extra_index_urls": Field(list, item=str),
}


@dataclass(frozen=True)
class PinnedRequirement:
    spec: str
    why: str

    @property
    def requirement(self) -> Requirement:
        return Requirement(self.spec)

    @property
    def name(self) -> str:
        return canonicalize_name(self.requirement.name)


@dataclass(frozen=True)
class Override(PinnedRequirement):
    """A pin that beats what a dependency declares (uv --override), and why it must."""


@dataclass(frozen=True)
class ExtensionBuild:
    """A compiled extension that ships only as an sdist (flash-attn): locked by the sdist's hash and built
    here, without network, against the profile's own torch and nvcc, for the CUDA architectures named."""

    name: str
    version: str
    cuda_archs: tuple[str, ...]
    requires: tuple[str, ...]  # what it needs at run time; the lock must hold each
    env: tuple[tuple[str, str], ...]  # build flags, as the package's setup.py reads them
    why: str

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"

    @property
    def flags(self) -> list[str]:
        """The build flags as KEY=VALUE, the form a build record keeps them in."""
        return [f"{k}={v}" for k, v in self.env]

    def inputs(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "archs": list(self.cuda_archs), "env": list(self.env)}


@dataclass(frozen=True)
class Sources:
    """Where wheels come from besides PyPI.

    ``pip_download`` names requirements fetched with ``pip download --no-deps`` before resolving,
    so pip's own configuration (find-links, index-url, PIP_* variables) decides where they come
    from; the directory they land in is handed to uv as a find-links source.  This keeps machine
    paths out of the profile: on one machine pip finds the torch CPU wheel on local disk, on
    another it is configured with the PyTorch CPU index.
    """

    pip_download: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    extra_index_urls: tuple[str, ...] = ()


@dataclass(frozen=True)
class Profile:
    name: str
    path: Path
    description: str
    python: str
    platform: str
    cuda: str
    base: Base
    snapshot: dt.date
    snapshot_why: str
    default: bool
    components: tuple[tuple[str, str], ...]
    requirements: tuple[PinnedRequirement, ...]
    layers: tuple[tuple[str, tuple[str, ...]], ...]
    sources: Sources
    waivers: tuple[tuple[str, str], ...] = ()  # (glob over a shared object's path, reason) for verify
    engine: str = "none"
    overrides: tuple[Override, ...] = ()
    builds: tuple[ExtensionBuild, ...] = ()

    @property
    def is_cpu(self) -> bool:
        return self.cuda == "none"

    @property
    def exclude_newer(self) -> str:
        """uv --exclude-newer value: the snapshot day at 00:00 UTC."""
        return f"{self.snapshot.isoformat()}T00:00:00Z"

    def component(self, name: str) -> str | None:
        return dict(self.components).get(name)

    @property
    def override_reasons(self) -> dict[str, str]:
        """Overridden distribution -> why, as manifests, bundles and verify reports carry it."""
        return {o.name: o.why for o in self.overrides}

    def lock_inputs(self) -> dict[str, Any]:
        """Everything the resolver sees; the lock is stale when the hash of this changes."""
        overrides = {"overrides": [o.spec for o in self.overrides]} if self.overrides else {}
        builds = {"builds": [b.inputs() for b in self.builds]} if self.builds else {}
        return {
            **overrides,
            **builds,
            "schema_version": SCHEMA_VERSION,
            "python": self.python,
            "platform": self.platform,
            "snapshot": self.exclude_newer,
            "requirements": [r.spec for r in self.requirements],
            "pip_download": list(self.sources.pip_download),
            "find_links": list(self.sources.find_links),
            "extra_index_urls": list(self.sources.extra_index_urls),
        }

    def sha256(self) -> str:
        blob = json.dumps(self.lock_inputs(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def build_of(self, dist_name: str) -> ExtensionBuild | None:
        name = canonicalize_name(dist_name)
        return next((b for b in self.builds if b.name == name), None)

    def layer_of(self, dist_name: str) -> str:
        name = canonicalize_name(dist_name)
        if name == "verlenv":
            return "verlenv"
        for layer, patterns in self.layers:
            if any(fnmatch.fnmatchcase(name, canonicalize_name(pattern)) for pattern in patterns):
                return layer
        return "deps"


def profile_names(paths: ProjectPaths) -> list[str]:
    return sorted(p.stem for p in paths.profiles.glob("*.toml"))


def load_profile(paths: ProjectPaths, name: str) -> Profile:
    path = paths.profile(name)
    if not path.is_file():
        known = profile_names(paths)
        raise ConfigError(
            f"no profile named '{name}' (looked for {path})",
            hint=did_you_mean(name, known) or f"known profiles: {', '.join(known) or 'none'}",
        )
    return parse_profile(path, load_bases(paths.bases))


def load_all(paths: ProjectPaths) -> list[Profile]:
    bases = load_bases(paths.bases)
    return [parse_profile(paths.profile(name), bases) for name in profile_names(paths)]


def default_profile(paths: ProjectPaths) -> str:
    defaults = [p.name for p in load_all(paths) if p.default]
    if len(defaults) != 1:
        raise ConfigError(f"exactly one profile must set 'default = true'; found {defaults or 'none'}")
    return defaults[0]


def parse_profile(path: Path, bases: dict[str, Base]) -> Profile:
    data = load_toml(path)
    check_table(data, PROFILE_FIELDS, path)
    if data["schema_version"] != SCHEMA_VERSION:
        raise ConfigError(f"{path}: 'schema_version' is {data['schema_version']}; this verlenv reads {SCHEMA_VERSION}")
    name = path.stem
    if not _NAME.match(name):
        raise ConfigError(f"{path}: profile name '{name}' may hold only letters, digits, '.', '_' and '-'")
    python = _check_python(data["python"], path)
    _check_platform(data["platform"], path)
    _check_cuda(data["cuda"], path)
    base = _check_base(data["base"], python, bases, path)
    requirements = _parse_requirements(data["requirements"], path)
    components = _parse_components(data["components"], requirements, path)
    return Profile(
        name=name,
        path=path,
        description=data["description"],
        python=python,
        platform=data["platform"],
        cuda=data["cuda"],
        base=base,
        snapshot=_check_snapshot(data["snapshot"], path),
        snapshot_why=data["snapshot_why"],
        default=data.get("default", False),
        components=components,
        requirements=requirements,
        layers=_parse_layers(data["layers"], path),
        sources=_parse_sources(data.get("sources", {}), path),
        waivers=_parse_waivers(data.get("waivers", []), path),
        engine=_check_engine(data["engine"], components, path),
        overrides=_parse_overrides(data.get("overrides", []), path),
        builds=_parse_builds(data.get("builds", []), data["cuda"], path),
    )


def _check_python(value: str, path: Path) -> str:
    match = _PYTHON.match(value)
    if not match or not 8 <= int(match.group(1)) <= 14:
        raise ConfigError(
            f"{path}: 'python' is '{value}'; expected a CPython minor version from 3.8 to 3.14, e.g. \"3.11\""
        )
    return value


def _check_platform(value: str, path: Path) -> None:
    if not _PLATFORM.match(value):
        raise ConfigError(
            f"{path}: 'platform' is '{value}'; expected uv's --python-platform form ARCH-manylinux_2_N",
            hint='Debian 12 (glibc 2.36) on x86-64 is "x86_64-manylinux_2_36"',
        )


def _check_cuda(value: str, path: Path) -> None:
    if value != "none" and not _CUDA.match(value):
        raise ConfigError(f"{path}: 'cuda' is '{value}'; expected MAJOR.MINOR such as \"13.0\", or \"none\" for CPU")


def _check_base(value: str, python: str, bases: dict[str, Base], path: Path) -> Base:
    if value not in bases:
        raise ConfigError(
            f"{path}: 'base' names '{value}', which images/bases.toml does not define",
            hint=did_you_mean(value, bases) or f"defined bases: {', '.join(sorted(bases))}",
        )
    base = bases[value]
    if base.python != python:
        raise ConfigError(f"{path}: 'python' is {python} but base '{value}' provides Python {base.python}")
    return base


def _check_snapshot(value: str, path: Path) -> dt.date:
    try:
        day = dt.date.fromisoformat(value)
    except ValueError:
        raise ConfigError(f"{path}: 'snapshot' is '{value}'; expected a date YYYY-MM-DD") from None
    if day > dt.datetime.now(dt.timezone.utc).date():
        raise ConfigError(f"{path}: 'snapshot' {value} lies in the future")
    return day


def _parse_requirements(items: list[dict[str, Any]], path: Path) -> tuple[PinnedRequirement, ...]:
    if not items:
        raise ConfigError(f"{path}: 'requirements' is empty")
    parsed: list[PinnedRequirement] = []
    for index, table in enumerate(items):
        where = f"requirements[{index}]"
        requirement = _parse_spec(table, path, where)
        if requirement.url:
            raise ConfigError(
                f"{path}: '{where}.spec' points at a URL; locks must come from an index so every file is hashed"
            )
        if not table["why"].strip():
            raise ConfigError(f"{path}: '{where}.why' is empty; say why this requirement or pin is here")
        _check_satisfiable(requirement, path, where)
        parsed.append(PinnedRequirement(spec=table["spec"], why=table["why"]))
    return tuple(parsed)


def _parse_spec(table: dict[str, Any], path: Path, where: str) -> Requirement:
    """A {spec, why} table's fields checked and its spec parsed, or ConfigError naming the entry."""
    check_table(table, REQUIREMENT_FIELDS, path, where)
    try:
        return Requirement(table["spec"])
    except InvalidRequirement as exc:
        raise ConfigError(f"{path}: '{where}.spec' is not a valid requirement: {exc}") from None


def _check_satisfiable(requirement: Requirement, path: Path, where: str) -> None:
    """An '==X' clause must satisfy every other clause of the same specifier set."""
    for clause in requirement.specifier:
        exact = clause.operator == "==" and "*" not in clause.version
        if exact and not requirement.specifier.contains(clause.version, prereleases=True):
            raise ConfigError(f"{path}: '{where}.spec' ({requirement}) can never be satisfied")


def _parse_components(
    table: dict[str, Any], requirements: tuple[PinnedRequirement, ...], path: Path
) -> tuple[tuple[str, str], ...]:
    components: list[tuple[str, str]] = []
    specs = {r.name: r.requirement.specifier for r in requirements}
    for name, version in table.items():
        key = f"components.{name}"
        if not isinstance(version, str):
            raise ConfigError(
                f"{path}: '{key}' must be a string, not {type(version).__name__} ({version!r})",
                hint=f'quote it: {name} = "{version}" (a float drops digits: 2.10 reads as 2.1)',
            )
        try:
            Version(version)
        except InvalidVersion:
            raise ConfigError(f"{path}: '{key}' = '{version}' is not a valid version") from None
        spec = specs.get(canonicalize_name(name))
        if spec is not None and not spec.contains(version, prereleases=True):
            raise ConfigError(f"{path}: '{key}' = '{version}' contradicts the requirement '{name}{spec}'")
        components.append((canonicalize_name(name), version))
    if not components:
        raise ConfigError(f"{path}: 'components' is empty; name at least torch")
    return tuple(components)


def _parse_layers(table: dict[str, Any], path: Path) -> tuple[tuple[str, tuple[str, ...]], ...]:
    check_table(table, LAYER_FIELDS, path, "layers")
    return tuple((layer, tuple(table.get(layer, ()))) for layer in DECLARED_LAYERS)


def _parse_sources(table: dict[str, Any], path: Path) -> Sources:
    check_table(table, SOURCE_FIELDS, path, "sources")
    for index, spec in enumerate(table.get("pip_download", ())):
        try:
            Requirement(spec)
        except InvalidRequirement as exc:
            raise ConfigError(f"{path}: 'sources.pip_download[{index}]' is not a requirement: {exc}") from None
    return Sources(
        pip_download=tuple(table.get("pip_download", ())),
        find_links=tuple(table.get("find_links", ())),
        extra_index_urls=tuple(table.get("extra_index_urls", ())),
    )


def _check_engine(value: str, components: tuple[tuple[str, str], ...], path: Path) -> str:
    if value not in ENGINES:
        raise ConfigError(
            f"{path}: 'engine' is '{value}'; expected one of {', '.join(ENGINES)}", hint=did_you_mean(value, ENGINES)
        )
    if value != "none" and value not in dict(components):
        raise ConfigError(f"{path}: 'engine' is '{value}' but 'components' names no {value} version")
    return value


def _parse_overrides(items: list[dict[str, Any]], path: Path) -> tuple[Override, ...]:
    overrides = []
    for index, table in enumerate(items):
        where = f"overrides[{index}]"
        _parse_spec(table, path, where)
        if not table["why"].strip():
            raise ConfigError(f"{path}: '{where}.why' is empty; an override must say why it beats the declared pin")
        overrides.append(Override(table["spec"], table["why"]))
    return tuple(overrides)


def _parse_builds(items: list[dict[str, Any]], cuda: str, path: Path) -> tuple[ExtensionBuild, ...]:
    builds = []
    for index, table in enumerate(items):
        where = f"builds[{index}]"
        check_table(table, BUILD_FIELDS, path, where)
        if cuda == "none" and table["cuda_archs"]:
            raise ConfigError(f"{path}: '{where}' builds CUDA code, but the profile's cuda is \"none\"")
        bad = [a for a in table["cuda_archs"] if not _ARCH.match(a)]
        if bad:
            raise ConfigError(
                f"{path}: '{where}.cuda_archs' must list compute capabilities like \"90\", got {bad or '[]'}"
            )
        env = []
        for item in table.get("env", []):
            key, sep, value = item.partition("=")
            if not sep or not key.isidentifier():
                raise ConfigError(f"{path}: '{where}.env' item {item!r} is not KEY=VALUE")
            env.append((key, value))
        name = canonicalize_name(table["name"])
        requires = tuple(canonicalize_name(r) for r in table.get("requires", []))
        builds.append(
            ExtensionBuild(name, table["version"], tuple(table["cuda_archs"]), requires, tuple(env), table["why"])
        )
    return tuple(builds)


def _parse_waivers(items: list[dict[str, Any]], path: Path) -> tuple[tuple[str, str], ...]:
    waivers = []
    for index, table in enumerate(items):
        check_table(table, WAIVER_FIELDS, path, f"waivers[{index}]")
        if not table["why"].strip():
            raise ConfigError(f"{path}: 'waivers[{index}].why' is empty; a waiver must say why the object may fail")
        waivers.append((table["object"], table["why"]))
    return tuple(waivers)
