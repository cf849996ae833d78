"""Merge what one ninja build folder finished into another of the same build.ninja, so a build split by
targets across two hosts (the H200's tree and a container here, both under /build) resumes as one: ninja
then rebuilds neither side's objects. The two build.ninja may list their statements in another order.
Objects are copied with their mtimes; the .ninja_log lines and .ninja_deps records (ninja's binary deps
log, version 4) of the copied outputs are added to the target's.

    python benchmarks/ninja_merge.py INTO FROM    (both: the folder holding build.ninja)

Run it while no ninja runs in INTO. Prints what it took; exit 2 when the two build.ninja differ.
"""

from __future__ import annotations

import shutil
import struct
import sys
from pathlib import Path

MAGIC = b"# ninjadeps\n"
VERSION = 4
DEPS_FLAG = 0x80000000


def read_deps(path: Path) -> dict[str, tuple[int, list[str]]]:
    """output path -> (mtime, input paths): the last record of each output wins, as in ninja."""
    data = path.read_bytes() if path.exists() else b""
    if not data:
        return {}
    if not data.startswith(MAGIC) or struct.unpack_from("<i", data, len(MAGIC))[0] != VERSION:
        raise SystemExit(f"{path}: not a version-{VERSION} ninja deps log")
    names: list[str] = []
    deps: dict[str, tuple[int, list[str]]] = {}
    at = len(MAGIC) + 4
    while at + 4 <= len(data):
        (head,) = struct.unpack_from("<I", data, at)
        size = head & ~DEPS_FLAG
        body = data[at + 4 : at + 4 + size]
        if len(body) < size:
            break  # a torn last record, as ninja itself drops it
        at += 4 + size
        if head & DEPS_FLAG:
            out, low, high = struct.unpack_from("<iII", body)
            ids = struct.unpack_from(f"<{(size - 12) // 4}i", body, 12)
            deps[names[out]] = ((high << 32) | low, [names[i] for i in ids])
        else:
            names.append(body[:-4].rstrip(b"\0").decode())
    return deps


def write_deps(path: Path, deps: dict[str, tuple[int, list[str]]]) -> None:
    ids: dict[str, int] = {}
    chunks = [MAGIC, struct.pack("<i", VERSION)]

    def node(name: str) -> int:
        if name not in ids:
            raw = name.encode()
            raw += b"\0" * (-len(raw) % 4)
            ids[name] = len(ids)
            chunks.append(struct.pack("<I", len(raw) + 4) + raw + struct.pack("<I", ~ids[name] & 0xFFFFFFFF))
        return ids[name]

    for out, (mtime, inputs) in deps.items():
        numbers = [node(out)] + [node(i) for i in inputs]
        body = struct.pack("<iII", numbers[0], mtime & 0xFFFFFFFF, mtime >> 32)
        body += struct.pack(f"<{len(inputs)}i", *numbers[1:])
        chunks.append(struct.pack("<I", len(body) | DEPS_FLAG) + body)
    staged = path.with_name(path.name + ".merging")
    staged.write_bytes(b"".join(chunks))
    staged.replace(path)


def read_log(path: Path) -> tuple[str, dict[str, str]]:
    """(header, output path -> its last line)."""
    lines = path.read_text().splitlines() if path.exists() else ["# ninja log v7"]
    return lines[0], {line.split("\t")[3]: line for line in lines[1:] if line.count("\t") == 4}


def merge(into: Path, source: Path) -> list[str]:
    if _statements(into / "build.ninja") != _statements(source / "build.ninja"):
        print(f"{into}/build.ninja and {source}/build.ninja differ: not the same build", file=sys.stderr)
        raise SystemExit(2)
    header, log = read_log(into / ".ninja_log")
    _, theirs = read_log(source / ".ninja_log")
    deps, their_deps = read_deps(into / ".ninja_deps"), read_deps(source / ".ninja_deps")
    root, their_root = _build_root(into), _build_root(source)
    taken = []
    for output, line in theirs.items():
        if output in log or output not in their_deps:
            continue  # done here already, or not finished there
        rel = Path(output).relative_to("/build")
        shutil.copy2(their_root / rel, root / rel)
        log[output], deps[output] = line, their_deps[output]
        taken.append(output)
    write_deps(into / ".ninja_deps", deps)
    staged = into / ".ninja_log.merging"  # beside it, keeping the log's usual mode (mkstemp's would be 0600)
    staged.write_text("\n".join([header, *log.values()]) + "\n")
    staged.replace(into / ".ninja_log")
    return taken


def _statements(ninja: Path) -> list[str]:
    """build.ninja's lines in any order: the far host's copy lists its targets first (ext_split.py)."""
    return sorted(line for line in ninja.read_text().splitlines() if line.strip())


def _build_root(folder: Path) -> Path:
    """The host folder mounted as /build: the one above src/."""
    for parent in folder.resolve().parents:
        if parent.name == "src":
            return parent.parent
    raise SystemExit(f"{folder}: not under a build's src/ folder")


def main(argv: list[str]) -> int:
    into, source = (Path(a) for a in argv)
    taken = merge(into, source)
    for output in taken:
        print(f"took {output.rsplit('/', 1)[-1]}")
    print(f"{len(taken)} object(s) merged into {into}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
