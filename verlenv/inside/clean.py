"""Stale artifacts in an installed environment and in compile caches (core; runs in containers).

Findings, each with a reason: files under a package's directory that no installed RECORD lists
(leftovers of an in-place upgrade), duplicate *.dist-info for one distribution, .pth / editable
finders that shadow an installed package, orphan __pycache__ entries, and compile caches written
by another version of torch / vLLM / Triton / flashinfer. Deletion only with apply=True, never of
a RECORDed file, never through a symlink, never outside the environment and the named caches.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from verlenv.inside.installed import Installed, read_installed, top_levels

STAMP = ".verlenv-stamp.json"
# The versions a compile cache depends on: a cache written under others is foreign.
CACHE_VERSIONS = ("torch", "vllm", "triton", "flashinfer-python", "sglang", "sgl-deep-gemm")


def default_cache_roots() -> dict[str, Path]:
    """The compile caches vLLM, Triton, flashinfer and TorchInductor write, as their variables place them."""
    home = Path.home()
    vllm_root = Path(os.environ.get("VLLM_CACHE_ROOT", home / ".cache" / "vllm"))
    return {
        "vllm": vllm_root / "torch_compile_cache",
        "triton": Path(os.environ.get("TRITON_CACHE_DIR", home / ".triton" / "cache")),
        "flashinfer": Path(os.environ.get("FLASHINFER_JIT_DIR", home / ".cache" / "flashinfer")),
        "inductor": Path(
            os.environ.get("TORCHINDUCTOR_CACHE_DIR", f"/tmp/torchinductor_{os.environ.get('USER', 'root')}")
        ),
        # SGLang's own: its cache root (FlashInfer autotune results by FlashInfer version under
        # flashinfer/autotune/) and DeepGEMM's JIT kernels (sglang/srt/environ.py)
        "sglang": Path(os.environ.get("SGLANG_CACHE_DIR", home / ".cache" / "sglang")),
        "deep_gemm": Path(os.environ.get("SGLANG_DG_CACHE_DIR", home / ".cache" / "deep_gemm")),
    }


def cache_versions(installed: dict[str, str]) -> dict[str, str]:
    return {name: installed.get(name, "") for name in CACHE_VERSIONS}


@dataclass(frozen=True)
class Stale:
    path: Path
    kind: str  # unrecorded | duplicate-dist-info | shadowing-pth | orphan-bytecode | foreign-cache | unreadable
    reason: str
    fix: str
    removable: bool = True


def find_stale(
    site: Path,
    cache_roots: dict[str, Path] | None = None,
    versions: dict[str, str] | None = None,
    added: dict[str, str] | None = None,
) -> list[Stale]:
    """``added``: the image manifest's files that verlenv put below site-packages itself; each counts
    as recorded only while it is still what the manifest says."""
    site = site.resolve()
    infos = read_installed(site)
    recorded = frozenset().union(*(i.files for i in infos)) if infos else frozenset()
    recorded |= _still_as_added(site, added or {})
    found = [*_duplicates(site, infos), *_unrecorded(site, infos, recorded), *_shadowing(site, infos)]
    for tool, root in (cache_roots or {}).items():
        found += _foreign_cache(tool, root, versions or {})
    return sorted(found, key=lambda s: (s.kind, str(s.path)))


def _still_as_added(site: Path, added: dict[str, str]) -> frozenset[str]:
    """Site-relative paths of the declared additions that match their declaration."""
    found = set()
    for name, what in added.items():
        path = Path(name)
        try:
            rel = path.relative_to(site)
        except ValueError:
            continue
        if _matches(path, what):
            found.add(str(rel))
    return frozenset(found)


def _matches(path: Path, what: str) -> bool:
    kind, _, value = what.partition(":")
    if kind == "symlink":
        return path.is_symlink() and str(path.readlink()) == value
    return kind == "sha256" and path.is_file() and not path.is_symlink() and _sha256(path) == value


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _unrecorded(site: Path, infos: list[Installed], recorded: frozenset[str]) -> Iterator[Stale]:
    """Files below each package directory that no RECORD lists, compared directory by directory.

    One set difference per directory instead of a lookup per file: a CUDA image has ~50,000 files
    below site-packages, most of them bytecode that pip did not record (it is compiled separately).
    """
    by_dir = _by_directory(recorded)
    root = str(site)
    listed: dict[str, set[str]] = {}  # what the walk saw, by directory (a parent comes before its children)
    for top, owner in sorted(top_levels(infos).items()):
        folder = site / top
        if not folder.is_dir() or folder.is_symlink():
            continue
        for dirpath, filenames in _walk_dirs(folder):
            rel_dir = dirpath[len(root) + 1 :]
            listed[rel_dir] = names = set(filenames)
            extra = names - by_dir.get(rel_dir, frozenset())
            if dirpath.endswith("/__pycache__"):
                yield from _orphans(site, rel_dir, extra, by_dir, listed)
                continue
            for filename in sorted(extra):
                yield Stale(
                    Path(dirpath, filename),
                    "unrecorded",
                    f"in {top}/ but not in the RECORD of {owner.name} {owner.version} (left by another version?)",
                    f"reinstall {owner.name} cleanly, or delete the leftovers (`verlenv clean --apply`)",
                )


def _orphans(
    site: Path, rel_dir: str, extra: set[str], by_dir: dict[str, frozenset[str]], listed: dict[str, set[str]]
) -> Iterator[Stale]:
    """Bytecode whose source is gone, or is itself a leftover; bytecode of a recorded source is fine."""
    parent = rel_dir.rsplit("/", 1)[0]
    present, recorded_sources = listed.get(parent, set()), by_dir.get(parent, frozenset())
    for filename in sorted(extra):
        source = filename.split(".", 1)[0] + ".py"
        if source not in present:
            yield Stale(
                site / rel_dir / filename,
                "orphan-bytecode",
                f"bytecode of {source}, which no longer exists",
                "delete it (`verlenv clean --apply`)",
            )
        elif source not in recorded_sources:
            yield Stale(
                site / rel_dir / filename,
                "orphan-bytecode",
                f"bytecode of {source}, itself a leftover",
                "delete it with its source (`verlenv clean --apply`)",
            )


def _by_directory(recorded: frozenset[str]) -> dict[str, frozenset[str]]:
    folders: dict[str, set[str]] = {}
    for rel in recorded:
        folder, _, name = rel.rpartition("/")
        folders.setdefault(folder, set()).add(name)
    return {folder: frozenset(names) for folder, names in folders.items()}


def _walk_dirs(folder: Path) -> Iterator[tuple[str, list[str]]]:
    """(directory, file names) below ``folder``; symlinked directories are not entered."""
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]  # noqa: PTH114, PTH118
        yield dirpath, filenames


def _walk(folder: Path) -> Iterator[str]:
    """Every file below ``folder`` as a string path; symlinked directories are not entered.

    Plain os.path on purpose: pathlib objects cost seconds over a CUDA image's 50,000 files.
    """
    for dirpath, filenames in _walk_dirs(folder):
        for filename in filenames:
            yield os.path.join(dirpath, filename)  # noqa: PTH118


def _duplicates(site: Path, infos: list[Installed]) -> Iterator[Stale]:
    by_name: dict[str, list[Installed]] = {}
    for info in infos:
        by_name.setdefault(info.name, []).append(info)
    for name, group in by_name.items():
        if len(group) < 2:
            continue
        scored = sorted(group, key=lambda i: _matching_files(site, i), reverse=True)
        keep = scored[0]
        for extra in scored[1:]:
            yield Stale(
                extra.path,
                "duplicate-dist-info",
                f"second dist-info for {name}: {extra.version} besides {keep.version}, whose RECORD matches "
                "the files on disk; the version reported for this package can be either",
                f"delete {extra.path.name} (`verlenv clean --apply`), then `pip install --force-reinstall "
                f"{name}=={keep.version}` if anything is still wrong",
            )


def _matching_files(site: Path, info: Installed, sample: int = 50) -> float:
    """Share of the dist-info's recorded files whose bytes on disk still match its RECORD.

    A share, not a count: the version installed last owns every file it wrote, while an older,
    larger version still "owns" all the files the newer one did not overwrite.
    """
    checked = sorted(info.hashes)[:sample]
    matched = 0
    for rel, digest in checked:
        try:
            data = (site / rel).read_bytes()
        except OSError:
            continue
        matched += base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode() == digest
    return matched / len(checked) if checked else 0.0


def _shadowing(site: Path, infos: list[Installed]) -> Iterator[Stale]:
    installed_tops = set(top_levels(infos))
    names = {i.name for i in infos}
    for pth in sorted(site.glob("*.pth")):
        try:
            lines = pth.read_text(errors="replace").splitlines()
        except OSError as exc:
            yield Stale(pth, "unreadable", f"cannot read: {exc.strerror}", "check its permissions", removable=False)
            continue
        for line in lines:
            hit = _shadowed(line, installed_tops, names)
            if hit:
                yield Stale(
                    pth,
                    "shadowing-pth",
                    f"puts another copy of '{hit}' ahead of the installed one ({line.strip()[:80]})",
                    f"remove the editable install (`pip uninstall` it) or delete {pth.name}",
                )
                break


def _shadowed(line: str, tops: set[str], names: set[str]) -> str:
    line = line.strip()
    if not line or line.startswith("#"):
        return ""
    if line.startswith("import "):  # editable finders: __editable___pkg_1_0_finder
        match = re.search(r"__editable___([A-Za-z0-9_]+?)_\d", line)
        name = canonicalize_name(match.group(1)) if match else ""
        return name if name.replace("-", "_") in tops else ""  # a real copy is installed too
    folder = Path(line)
    if folder.is_dir():
        for top in tops:
            if _importable(folder / top) or (folder / f"{top}.py").exists():
                return top
    return ""


def _importable(folder: Path) -> bool:
    # A data folder two wheels share (an 'include' of headers, seen in a venv that reuses another's
    # packages) shadows no import; a package, or a namespace holding modules, does.
    if not folder.is_dir():
        return False
    return any(p.suffix in (".py", ".so") or (p / "__init__.py").exists() for p in folder.iterdir())


def _foreign_cache(tool: str, root: Path, versions: dict[str, str]) -> Iterator[Stale]:
    if not root.is_dir() or root.is_symlink():
        return
    stamp = root / STAMP
    if tool == "flashinfer":
        yield from _flashinfer_versions(root, versions.get("flashinfer-python", ""))
        return
    if tool == "sglang" and (root / "flashinfer" / "autotune").is_dir():
        yield from _flashinfer_versions(root / "flashinfer" / "autotune", versions.get("flashinfer-python", ""))
    if not stamp.exists():
        return
    try:
        written = json.loads(stamp.read_text())
    except (OSError, ValueError):
        yield Stale(stamp, "foreign-cache", "unreadable verlenv stamp", f"delete {root}")
        return
    changed = {k: (v, versions.get(k, "")) for k, v in written.items() if versions.get(k, "") != v}
    if changed:
        what = ", ".join(f"{k} {old or '-'} -> {new or '-'}" for k, (old, new) in sorted(changed.items()))
        yield Stale(
            root,
            "foreign-cache",
            f"{tool} compile cache written under other versions ({what})",
            f"delete it (`verlenv clean --apply`) or point {tool.upper()}_CACHE at a fresh directory",
        )


def _flashinfer_versions(root: Path, installed: str) -> Iterator[Stale]:
    for child in sorted(root.iterdir()):
        if child.is_dir() and re.match(r"^\d+\.\d+", child.name) and installed and child.name != installed:
            yield Stale(
                child,
                "foreign-cache",
                f"FlashInfer cache ({root.name}) of flashinfer {child.name}; installed is {installed}",
                "delete it (`verlenv clean --apply`)",
            )


def write_stamp(root: Path, versions: dict[str, str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / STAMP).write_text(json.dumps(versions, sort_keys=True))


def apply(found: list[Stale], site: Path, cache_roots: dict[str, Path]) -> list[Path]:
    """Delete the removable findings; refuse anything outside the environment and cache roots."""
    allowed = [site.resolve(), *(r.resolve() for r in cache_roots.values() if r.exists())]
    leaving = {i.path.resolve() for i in found if i.kind == "duplicate-dist-info"}
    kept = [i for i in read_installed(site) if i.path.resolve() not in leaving] if site.exists() else []
    recorded = frozenset().union(*(i.files for i in kept)) if kept else frozenset()
    removed = []
    for item in found:
        if not item.removable:
            continue
        # Check containment without following a final symlink: a link is removed, never its target.
        where = item.path.parent.resolve() / item.path.name
        if not any(where == root or root in where.parents for root in allowed):
            continue
        if _holds_recorded(where, site.resolve(), recorded):
            continue  # never delete a file that a kept distribution's RECORD lists
        if item.path.is_dir() and not item.path.is_symlink():
            shutil.rmtree(item.path)
        else:
            item.path.unlink(missing_ok=True)
        removed.append(item.path)
    return removed


def _holds_recorded(path: Path, site: Path, recorded: frozenset[str]) -> bool:
    if not path.is_relative_to(site):
        return False
    if path.is_dir() and not path.is_symlink():
        return any(Path(p).relative_to(site).as_posix() in recorded for p in _walk(path))
    return path.relative_to(site).as_posix() in recorded


def stamp_caches(roots: dict[str, Path], versions: dict[str, str]) -> None:
    for root in roots.values():
        if root.is_dir():
            write_stamp_if_missing(root, versions)


def write_stamp_if_missing(root: Path, versions: dict[str, str]) -> None:
    """Record which versions wrote this cache, so a later upgrade can be told apart."""
    if not (root / STAMP).exists():
        with contextlib.suppress(OSError):  # a read-only cache is fine: we just cannot vouch for it later
            write_stamp(root, versions)
