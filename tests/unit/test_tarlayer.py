"""The layer writer: one tree, however it was made, gives one digest; any real change gives another."""

from __future__ import annotations

import hashlib
import io
import os
import random
import tarfile
from pathlib import Path

import pytest

from verlenv.image.tarlayer import DIR, FILE, HARDLINK, SYMLINK, canonical_mode, tar_items, tree_items, write_layer

EPOCH = 1758758400
FILES = {
    "bin/tool": (b"#!/bin/sh\necho hi\n", 0o755),
    "lib/python3.11/site-packages/pkg/__init__.py": (b"VALUE = 1\n", 0o644),
    "lib/python3.11/site-packages/pkg/data.bin": (bytes(range(256)) * 64, 0o644),
    "lib/python3.11/site-packages/pkg-1.0.dist-info/RECORD": (b"pkg/__init__.py,,\n", 0o644),
    "lib/python3.11/site-packages/pkg-b/x.py": (b"", 0o644),
    "share/empty/.keep": (b"", 0o644),
}


def make_tree(root: Path, *, umask: int, order_seed: int, mtime: int, owner: int) -> Path:
    """FILES under ``root``, created in a shuffled order under ``umask`` with the given times and owner."""
    old = os.umask(umask)
    try:
        names = list(FILES)
        random.Random(order_seed).shuffle(names)
        for name in names:
            data, mode = FILES[name]
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            path.chmod(mode & ~umask)
        (root / "bin" / "python3").symlink_to("/usr/bin/python3.11")
        os.link(root / "bin" / "tool", root / "bin" / "tool-again")
        for path in [root, *root.rglob("*")]:
            os.utime(path, (mtime, mtime), follow_symlinks=False)
            os.lchown(path, owner, owner)
    finally:
        os.umask(old)
    return root


def digest(tree: Path, out: Path) -> str:
    return write_layer(tree_items(tree, "opt/venv"), out, EPOCH).diff_id


def test_the_same_tree_made_two_ways_gives_one_digest(tmp_path: Path) -> None:
    first = make_tree(tmp_path / "a", umask=0o022, order_seed=1, mtime=1_000_000_000, owner=0)
    second = make_tree(tmp_path / "b", umask=0o077, order_seed=2, mtime=1_700_000_123, owner=4321)
    assert digest(first, tmp_path / "a.tar") == digest(second, tmp_path / "b.tar")
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()


@pytest.mark.parametrize(
    "change",
    [
        lambda root: (root / "lib/python3.11/site-packages/pkg/data.bin").write_bytes(b"\x01" + bytes(range(255))),
        lambda root: (root / "lib/python3.11/site-packages/pkg/__init__.py").chmod(0o755),
        lambda root: (root / "share/new.txt").write_bytes(b""),
        lambda root: (root / "bin/python3").unlink() or (root / "bin/python3").symlink_to("/usr/bin/python3"),
    ],
    ids=["byte", "mode", "added-file", "symlink-target"],
)
def test_a_real_change_changes_the_digest(tmp_path: Path, change) -> None:  # type: ignore[no-untyped-def]
    reference = digest(make_tree(tmp_path / "a", umask=0o022, order_seed=1, mtime=1, owner=0), tmp_path / "a.tar")
    changed = make_tree(tmp_path / "b", umask=0o022, order_seed=1, mtime=1, owner=0)
    change(changed)
    assert digest(changed, tmp_path / "b.tar") != reference


def test_entries_are_sorted_normalized_and_hashed(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "t", umask=0o077, order_seed=3, mtime=5, owner=99)
    info = write_layer(tree_items(tree, "opt/venv"), tmp_path / "t.tar", EPOCH)
    paths = [e.path for e in info.entries]
    assert paths == sorted(paths, key=str.encode)
    assert paths[:2] == ["opt", "opt/venv"]
    by_path = {e.path: e for e in info.entries}
    assert by_path["opt/venv/bin/tool"].kind == FILE and by_path["opt/venv/bin/tool"].mode == 0o755
    assert by_path["opt/venv/bin/tool-again"].kind == HARDLINK
    assert by_path["opt/venv/bin/tool-again"].target == "opt/venv/bin/tool"
    assert by_path["opt/venv/bin/python3"].kind == SYMLINK
    assert by_path["opt/venv/lib"].kind == DIR and by_path["opt/venv/lib"].mode == 0o755
    init = by_path["opt/venv/lib/python3.11/site-packages/pkg/__init__.py"]
    assert init.mode == 0o644
    assert init.sha256 == hashlib.sha256(b"VALUE = 1\n").hexdigest()
    with tarfile.open(tmp_path / "t.tar") as tar:
        members = tar.getmembers()
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members} == {(0, 0, "", "", EPOCH)}
    assert not any(m.pax_headers.keys() - {"path", "linkpath"} for m in members)


def test_a_tar_source_is_renormalized_with_its_owners_kept(tmp_path: Path) -> None:
    """The Debian base arrives as a tar whose owners and special modes are real: they are kept, while
    order, times and hard-link targets are made canonical."""
    source = tmp_path / "base.tar"
    with tarfile.open(source, "w") as tar:
        for name, kind, mode, uid, link in [
            ("./usr/bin/zz", tarfile.REGTYPE, 0o4755, 0, ""),
            ("./usr/bin/aa", tarfile.LNKTYPE, 0o4755, 0, "./usr/bin/zz"),
            ("./tmp", tarfile.DIRTYPE, 0o1777, 0, ""),
            ("./etc/shadow", tarfile.REGTYPE, 0o640, 42, ""),
            ("./usr", tarfile.DIRTYPE, 0o755, 0, ""),
            ("./usr/bin", tarfile.DIRTYPE, 0o755, 0, ""),
            ("./etc", tarfile.DIRTYPE, 0o755, 0, ""),
        ]:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.gid, info.linkname, info.mtime = kind, mode, uid, link, 123456
            data = b"binary" if kind == tarfile.REGTYPE else b""
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with tarfile.open(source) as tar:
        info = write_layer(tar_items(tar), tmp_path / "out.tar", EPOCH)
    by_path = {e.path: e for e in info.entries}
    assert [e.path for e in info.entries] == ["etc", "etc/shadow", "tmp", "usr", "usr/bin", "usr/bin/aa", "usr/bin/zz"]
    assert by_path["tmp"].mode == 0o1777
    assert by_path["etc/shadow"].gid == 42 and by_path["etc/shadow"].mode == 0o640
    # the link group's first path holds the data now; the old target points at it
    assert by_path["usr/bin/aa"].kind == FILE and by_path["usr/bin/aa"].mode == 0o4755
    assert by_path["usr/bin/zz"].kind == HARDLINK and by_path["usr/bin/zz"].target == "usr/bin/aa"
    with tarfile.open(tmp_path / "out.tar") as tar:
        assert tar.extractfile("usr/bin/aa").read() == b"binary"  # type: ignore[union-attr]


def test_canonical_mode_ignores_the_umask_but_keeps_special_bits() -> None:
    assert canonical_mode(0o600, False) == 0o644
    assert canonical_mode(0o700, False) == 0o755
    assert canonical_mode(0o700, True) == 0o755
    assert canonical_mode(0o1777, True) == 0o1777
    assert canonical_mode(0o2775, True) == 0o2775
