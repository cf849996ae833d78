"""images/bases.toml: the base images a profile may build on.

Two kinds.  ``debian`` bases are made here from Debian packages by ``verlenv base`` (mmdebstrap)
and are pinned by the name, version and sha256 of every .deb and by the DiffID of the layer they
make.  ``registry`` bases (nvidia/cuda
and friends) are pulled; they must carry ``digest = "sha256:..."`` or the build refuses them
unless the user opts out explicitly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from verlenv.errors import ConfigError
from verlenv.profiles.schema import Field, check_table

KINDS = ("debian", "registry")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_VERSION = re.compile(r"^\d+(\.\d+)+$")

BASE_FIELDS = {
    "kind": Field(str, required=True),
    "description": Field(str),
    "image": Field(str, required=True),
    "digest": Field(str),
    "python": Field(str, required=True),
    "glibc": Field(str, required=True),
    "glibcxx": Field(str),
    "suite": Field(str),
    "mirror": Field(str),
    "packages": Field(list, item=str),
    "libraries": Field(list, item=str),
    "cuda": Field(str),
    # recorded by `verlenv base` for debian bases: what the layer is made of, and what it came to
    "recipe": Field(str),
    "epoch": Field(int),
    "debs": Field(list, item=str),
    "diff_id": Field(str),
}


@dataclass(frozen=True)
class BaseFacts:
    """What a base image (or the system doctor runs on) provides: library file names and the newest
    glibc / libstdc++ symbol versions. `verlenv base` reads it off a root filesystem and records it
    here; verify resolves DT_NEEDED and symbol versions against it."""

    libraries: frozenset[str]
    glibc: str
    glibcxx: str


@dataclass(frozen=True)
class Base:
    name: str
    kind: str
    image: str
    digest: str
    python: str
    facts: BaseFacts
    description: str = ""
    suite: str = ""
    mirror: str = ""
    cuda: str = ""
    packages: tuple[str, ...] = ()
    recipe: str = ""  # hash of what the recorded debs were resolved for (suite, packages, variant)
    epoch: int = 0  # SOURCE_DATE_EPOCH of the base layer: when its debs were resolved
    debs: tuple[str, ...] = ()  # "NAME VERSION ARCH sha256:HEX", one per .deb
    diff_id: str = ""  # the base layer those debs make

    @property
    def pinned(self) -> bool:
        return bool(self.digest)

    @property
    def reference(self) -> str:
        """What to put after FROM: by digest when pinned, else by tag."""
        return f"{self.image}@{self.digest}" if self.digest else self.image


def load_bases(path: Path) -> dict[str, Base]:
    if not path.is_file():
        raise ConfigError(f"{path}: file not found")
    return load_bases_text(path.read_text(), path)


def _parse_base(name: str, table: object, path: Path) -> Base:
    where = f"bases.{name}"
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: '{where}' must be a table")
    check_table(table, BASE_FIELDS, path, where)
    if table["kind"] not in KINDS:
        raise ConfigError(f"{path}: '{where}.kind' is '{table['kind']}'; expected one of {', '.join(KINDS)}")
    digest = table.get("digest", "")
    if digest and not _DIGEST.match(digest):
        raise ConfigError(f"{path}: '{where}.digest' must look like sha256:<64 hex digits>, got '{digest}'")
    for key in ("python", "glibc", "glibcxx"):
        value = table.get(key, "")
        if value and not _VERSION.match(value):
            raise ConfigError(f"{path}: '{where}.{key}' is not a version: '{value}'")
    return Base(
        name=name,
        kind=table["kind"],
        image=table["image"],
        digest=digest,
        python=table["python"],
        facts=BaseFacts(frozenset(table.get("libraries", ())), table["glibc"], table.get("glibcxx", "")),
        description=table.get("description", ""),
        suite=table.get("suite", ""),
        mirror=table.get("mirror", ""),
        cuda=table.get("cuda", ""),
        packages=tuple(table.get("packages", ())),
        recipe=table.get("recipe", ""),
        epoch=int(table.get("epoch", 0)),
        debs=tuple(table.get("debs", ())),
        diff_id=table.get("diff_id", ""),
    )


def _toml_value(value: str | int | list[str]) -> str:
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    items = [_toml_value(v) for v in value]
    lines, line = [], "    "
    for item in items:
        if len(line) + len(item) > 96:
            lines.append(line.rstrip())
            line = "    "
        line += item + ", "
    lines.append(line.rstrip())
    return "[\n" + "\n".join(lines) + "\n]"


def record_base(path: Path, name: str, values: dict[str, str | int | list[str]]) -> None:
    """Set ``values`` in the ``[bases."name"]`` table of bases.toml, keeping everything else as written."""
    from verlenv import atomic

    lines = path.read_text().splitlines()
    header = f'[bases."{name}"]'
    if header not in lines:
        raise ConfigError(f"{path}: no table {header}")
    start = lines.index(header) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("[")), len(lines))
    section = lines[start:end]
    split = len(section)
    while split and (not section[split - 1].strip() or section[split - 1].lstrip().startswith("#")):
        split -= 1  # trailing comments and blank lines introduce the next table: keep them there
    body = _drop_keys(section[:split], set(values))
    body += [f"{key} = {_toml_value(value)}" for key, value in values.items()]
    tail = section[split:] or [""]
    text = "\n".join([*lines[:start], *body, *tail, *lines[end:]]).rstrip("\n") + "\n"
    load_bases_text(text, path)  # never write a file we could not read back
    atomic.write_text(path, text)


def _drop_keys(body: list[str], keys: set[str]) -> list[str]:
    kept, skipping = [], False
    for line in body:
        key = line.split("=", 1)[0].strip() if "=" in line and not line.startswith(" ") else None
        if skipping:
            skipping = not line.startswith("]")
            continue
        if key in keys:
            skipping = line.rstrip().endswith("[")
            continue
        kept.append(line)
    return kept


def load_bases_text(text: str, path: Path) -> dict[str, Base]:
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    check_table(data, {"bases": Field(dict, required=True)}, path)
    return {name: _parse_base(name, table, path) for name, table in data["bases"].items()}
