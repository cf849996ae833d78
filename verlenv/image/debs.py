"""Debian packages as locked inputs: each .deb recorded by name, version and sha256, kept in the
content-addressed cache, served to mmdebstrap from a local repository of exactly those files, and
compared with what a mirror offers now (`verlenv base --check`)."""

from __future__ import annotations

import hashlib
import lzma
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from verlenv.errors import ConfigError, IntegrityError, ServiceError
from verlenv.wheels.cache import Cache, sha256_of


@dataclass(frozen=True)
class Deb:
    name: str
    version: str
    arch: str
    sha256: str

    def line(self) -> str:
        return f"{self.name} {self.version} {self.arch} sha256:{self.sha256}"

    @classmethod
    def parse(cls, line: str, where: str) -> Deb:
        parts = line.split()
        if len(parts) != 4 or not parts[3].startswith("sha256:") or len(parts[3]) != 71:
            raise ConfigError(f"{where}: '{line}' is not 'NAME VERSION ARCH sha256:HEX'")
        return cls(parts[0], parts[1], parts[2], parts[3].removeprefix("sha256:"))

    @property
    def filename(self) -> str:
        return f"{self.name}_{self.version.replace(':', '%3a')}_{self.arch}.deb"


@dataclass(frozen=True)
class Source:
    """One apt source: `deb URI SUITE main`."""

    uri: str
    suite: str

    def line(self, options: str = "") -> str:
        return f"deb {options + ' ' if options else ''}{self.uri} {self.suite} main"


def control(path: Path) -> str:
    proc = subprocess.run(["dpkg-deb", "-f", str(path)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise IntegrityError(f"{path}: not a readable .deb ({proc.stderr.strip()})")
    return proc.stdout.rstrip("\n")


def _field(text: str, name: str) -> str:
    for line in text.splitlines():
        if line.startswith(f"{name}:"):
            return line.split(":", 1)[1].strip()
    raise IntegrityError(f"the control file lacks {name}:\n{text[:200]}")


def record(paths: Iterable[Path], cache: Cache) -> list[Deb]:
    """Hash each downloaded .deb, store it in the cache, and return its record (sorted by name)."""
    found = []
    for path in paths:
        fields = control(path)
        sha = sha256_of(path)
        deb = Deb(_field(fields, "Package"), _field(fields, "Version"), _field(fields, "Architecture"), sha)
        if cache.cached_file(sha) is None:
            staged = cache.tmp / f"{sha}.deb"
            shutil.copyfile(path, staged)
            cache.store(staged, sha, deb.filename)
        found.append(deb)
    return sorted(found, key=lambda d: (d.name, d.arch))


def local_repository(debs: Iterable[Deb], cache: Cache, where: Path, suite: str) -> Path:
    """A repository at ``where`` holding exactly ``debs`` (a `dists/SUITE` with a Packages index):
    mmdebstrap resolves against it, so nothing the mirror published since can slip in."""
    pool = where / "pool"
    index = where / "dists" / suite / "main" / "binary-amd64"
    pool.mkdir(parents=True)
    index.mkdir(parents=True)
    stanzas = []
    for deb in debs:
        cached = cache.cached_file(deb.sha256)
        if cached is None:
            raise IntegrityError(f"{deb.filename} (sha256 {deb.sha256}) is not in the cache")
        target = pool / deb.filename
        _link(cached, target)
        stanzas.append(
            f"{control(target)}\nFilename: pool/{deb.filename}\nSize: {target.stat().st_size}\nSHA256: {deb.sha256}\n"
        )
    (index / "Packages").write_text("\n".join(stanzas))
    release = f"Origin: verlenv\nSuite: {suite}\nCodename: {suite}\nComponents: main\nArchitectures: amd64\n"
    (where / "dists" / suite / "Release").write_text(release)
    return where


def _link(source: Path, target: Path) -> None:
    try:
        target.hardlink_to(source)
    except OSError:
        shutil.copyfile(source, target)


@dataclass(frozen=True)
class Offer:
    """One package version a mirror offers: where to get it and its sha256."""

    version: str
    url: str
    sha256: str


def mirror_offers(sources: Iterable[Source]) -> dict[tuple[str, str], list[Offer]]:
    """(name, arch) -> every version the sources' amd64 Packages indexes list (all suites together)."""
    offers: dict[tuple[str, str], list[Offer]] = {}
    for source in sources:
        url = f"{source.uri.rstrip('/')}/dists/{source.suite}/main/binary-amd64/Packages.xz"
        for stanza in _fetch_index(url).split("\n\n"):
            fields = dict(_pairs(stanza))
            if "Package" in fields and "Filename" in fields:
                key = (fields["Package"], fields.get("Architecture", "amd64"))
                offer = Offer(fields["Version"], f"{source.uri.rstrip('/')}/{fields['Filename']}", fields["SHA256"])
                offers.setdefault(key, []).append(offer)
    return offers


def _pairs(stanza: str) -> Iterable[tuple[str, str]]:
    for line in stanza.splitlines():
        if line and not line[0].isspace() and ":" in line:
            key, value = line.split(":", 1)
            yield key, value.strip()


def _fetch_index(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=120) as response:
            return lzma.decompress(response.read()).decode("utf-8", errors="replace")
    except (urllib.error.URLError, OSError, lzma.LZMAError) as exc:
        raise ServiceError(f"cannot read the package index {url}: {exc}") from None


def newest(versions: Iterable[str]) -> str:
    """The highest Debian version, by dpkg's own ordering."""
    best = ""
    for version in versions:
        if not best or _dpkg_greater(version, best):
            best = version
    return best


def _dpkg_greater(left: str, right: str) -> bool:
    return subprocess.run(["dpkg", "--compare-versions", left, "gt", right], check=False).returncode == 0


def fetch(deb: Deb, offers: dict[tuple[str, str], list[Offer]], cache: Cache) -> Path:
    """Download a recorded .deb the cache lacks, checking it against the recorded sha256."""
    match = [o for o in offers.get((deb.name, deb.arch), []) if o.version == deb.version]
    if not match:
        raise ConfigError(
            f"{deb.name} {deb.version} ({deb.arch}) is no longer on the mirror, and the cache lacks it",
            hint="point --mirror at a snapshot of the date it was recorded (snapshot.debian.org), "
            "or move the base to the mirror's versions with `verlenv base NAME --update`",
        )
    staged = cache.tmp / f"{deb.sha256}.part"
    try:
        with urllib.request.urlopen(match[0].url, timeout=300) as response, staged.open("wb") as out:
            shutil.copyfileobj(response, out)
    except (urllib.error.URLError, OSError) as exc:
        staged.unlink(missing_ok=True)
        raise ServiceError(f"cannot download {match[0].url}: {exc}") from None
    actual = hashlib.sha256(staged.read_bytes()).hexdigest()
    if actual != deb.sha256:
        staged.unlink(missing_ok=True)
        raise IntegrityError(f"{match[0].url}: sha256 is {actual}, the base records {deb.sha256}")
    return cache.store(staged, deb.sha256, deb.filename)
