"""Package index access: list a project's files with their sha256 (PEP 691 JSON or PEP 503 HTML).

Index URLs come from configuration, never from this code: $VERLENV_INDEX_URL, else $UV_INDEX_URL
or $PIP_INDEX_URL, else pip's configured index-url, else pip's built-in default.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from dataclasses import dataclass
from functools import lru_cache
from html.parser import HTMLParser
from pathlib import Path

from packaging.utils import canonicalize_name

from verlenv.errors import ResolutionError
from verlenv.lock.tools import pip_command

_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    sha256: str
    size: int = 0
    upload_time: str = ""  # PEP 700, where the index says (ISO 8601)


def default_index_url() -> str:
    for var in ("VERLENV_INDEX_URL", "UV_INDEX_URL", "PIP_INDEX_URL"):
        if os.environ.get(var):
            return os.environ[var]
    return _pip_index_url()


@lru_cache(maxsize=1)
def _pip_index_url() -> str:
    """pip's configured index-url, else pip's built-in default: this code names no index host."""
    pip = pip_command()
    probe = subprocess.run([*pip, "config", "get", "global.index-url"], capture_output=True, text=True, check=False)
    if probe.returncode == 0 and probe.stdout.strip():
        return probe.stdout.strip()
    for python in _pythons_of(pip):
        default = subprocess.run(
            [python, "-c", "from pip._internal.models.index import PyPI; print(PyPI.simple_url)"],
            capture_output=True,
            text=True,
            check=False,
        )
        if default.returncode == 0 and default.stdout.strip():
            return default.stdout.strip()
    raise ResolutionError(
        f"no package index configured, and no Python with pip found to ask for its default (pip: {' '.join(pip)})",
        hint="set VERLENV_INDEX_URL (or PIP_INDEX_URL)",
    )


def _pythons_of(pip: list[str]) -> list[str]:
    """Interpreters that may hold ``pip``'s own package. A pip found on PATH can be a shell script
    (pyenv's shim starts `#!/usr/bin/env bash`; run from a uv venv without pip, verlenv found that one
    and gave up), so python3 on PATH is tried after the script's own interpreter."""
    if len(pip) > 1:
        return [pip[0]]
    found = [_shebang(Path(pip[0])), shutil.which("python3") or ""]
    return [p for p in dict.fromkeys(found) if p and Path(p).name.startswith("python")]


def _shebang(script: Path) -> str:
    first = script.read_text(errors="replace").splitlines()[0] if script.exists() else ""
    if not first.startswith("#!"):
        return sys.executable
    words = first[2:].split()
    if len(words) > 1 and Path(words[0]).name == "env":  # #!/usr/bin/env python3
        return shutil.which(words[-1]) or words[-1]
    return words[0] if words else sys.executable


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.links.append(href)


def project_files(index_url: str, name: str) -> list[IndexFile]:
    """Every file the index lists for ``name`` that carries a sha256 (others cannot be verified)."""
    url = f"{index_url.rstrip('/')}/{canonicalize_name(name)}/"
    request = urllib.request.Request(url, headers={"Accept": _ACCEPT, "User-Agent": "verlenv"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            body = response.read()
            kind = response.headers.get("Content-Type", "")
    except (OSError, ValueError) as exc:
        if getattr(exc, "code", None) == 404 or isinstance(exc, FileNotFoundError):
            return []
        raise ResolutionError(f"cannot read the index page for {name} ({url}): {exc}") from None
    if "json" in kind:
        return _from_json(json.loads(body), url)
    return _from_html(body.decode("utf-8", "replace"), url)


def _from_json(data: dict, base: str) -> list[IndexFile]:  # type: ignore[type-arg]
    files = []
    for entry in data.get("files", []):
        sha = entry.get("hashes", {}).get("sha256")
        if sha:
            url = urllib.parse.urljoin(base, entry["url"])
            size, uploaded = int(entry.get("size") or 0), str(entry.get("upload-time") or "")
            files.append(IndexFile(entry["filename"], url, sha, size, uploaded))
    return files


def sdist_of(name: str, version: str, exclude_newer: str, index_url: str = "") -> IndexFile:
    """The sdist of name==version on the index, uploaded no later than the lock's snapshot."""
    files = project_files(index_url or default_index_url(), name)
    stems = {f"{canonicalize_name(name).replace('-', '_')}-{version}", f"{name}-{version}"}
    found = [f for f in files if f.filename.removesuffix(".tar.gz") in stems and f.filename.endswith(".tar.gz")]
    dated = [f for f in found if not f.upload_time or f.upload_time <= exclude_newer.replace("Z", "")]
    if not dated:
        raise ResolutionError(
            f"{name} {version} has no sdist on the index" + (f" uploaded before {exclude_newer}" if found else ""),
            hint="check the profile's [[builds]] entry (name, version) against the index",
        )
    return dated[0]


def _from_html(text: str, base: str) -> list[IndexFile]:
    parser = _Anchors()
    parser.feed(text)
    files = []
    for href in parser.links:
        link, _, fragment = href.partition("#")
        if fragment.startswith("sha256="):
            url = urllib.parse.urljoin(base, link)
            files.append(IndexFile(Path(urllib.parse.urlparse(url).path).name, url, fragment[7:]))
    return files
