"""Metadata check: Requires-Dist with markers and extras, and verl's vLLM gate."""

from __future__ import annotations

import pytest
from packaging.requirements import Requirement

from verlenv.errors import ConfigError
from verlenv.verify.distmeta import DistMeta
from verlenv.verify.metadata import check_engine_gate, check_requirements


def _meta(name: str, version: str, *requires: str) -> DistMeta:
    return DistMeta(name, version, tuple(requires))


def test_satisfied_set_has_no_violations() -> None:
    metas = {"a": _meta("a", "1.0", "b>=2"), "b": _meta("b", "2.1")}
    assert check_requirements(metas, [Requirement("a")], "3.11", "x86_64-manylinux_2_36") == []


def test_version_conflict_and_absent_dist_are_reported() -> None:
    metas = {"a": _meta("a", "1.0", "b<2", "c"), "b": _meta("b", "2.1")}
    found = {v.render() for v in check_requirements(metas, [Requirement("a")], "3.11", "x86_64-manylinux_2_36")}
    assert found == {"a requires b<2: the lock has b 2.1", "a requires c: not in the lock"}


def test_markers_are_evaluated_for_the_target_not_the_host() -> None:
    metas = {
        "a": _meta(
            "a",
            "1.0",
            "winonly; sys_platform == 'win32'",
            "armonly; platform_machine == 'aarch64'",
            "old; python_version < '3.10'",
            "needed; python_version >= '3.11'",
        )
    }
    found = {v.render() for v in check_requirements(metas, [Requirement("a")], "3.11", "x86_64-manylinux_2_36")}
    assert found == {'a requires needed; python_version >= "3.11": not in the lock'}


def test_extras_propagate_transitively() -> None:
    metas = {
        "top": _meta("top", "1", "ray[default]>=2"),
        "ray": _meta("ray", "2.5", "aiohttp; extra == 'default'", "grpcio[extra1]; extra == 'default'"),
        "aiohttp": _meta("aiohttp", "3"),
        "grpcio": _meta("grpcio", "1", "protobuf>=5; extra == 'extra1'"),
        "protobuf": _meta("protobuf", "4"),
    }
    found = {v.render() for v in check_requirements(metas, [Requirement("top")], "3.11", "x86_64-manylinux_2_36")}
    assert found == {'grpcio requires protobuf>=5; extra == "extra1": the lock has protobuf 4'}


def test_without_the_extra_its_requirements_do_not_count() -> None:
    metas = {"top": _meta("top", "1", "ray>=2"), "ray": _meta("ray", "2.5", "aiohttp; extra == 'default'")}
    assert check_requirements(metas, [Requirement("top")], "3.11", "x86_64-manylinux_2_36") == []


def test_verl_vllm_gate() -> None:
    assert check_engine_gate({"verl": "0.5.0", "vllm": "0.8.5.post1"}) == []
    [bad] = check_engine_gate({"verl": "0.6.1", "vllm": "0.6.3"})
    assert "verl refuses vllm 0.6.3" in bad.problem
    problems = [v.problem for v in check_engine_gate({"verl": "0.5.0", "vllm": "0.7.3"})]
    assert problems == ["vllm 0.7.3 is in the 0.7.x line verl warns against (host-memory leak with n>1)"]
    assert check_engine_gate({"verl": "0.5.0"}) == []


def test_a_wheels_metadata_is_kept_by_its_sha256_and_read_again_when_the_kept_copy_is_bad(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import zipfile

    from verlenv.verify.distmeta import read_meta_kept
    from verlenv.wheels.cache import Cache

    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(
            "demo-1.0.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: Demo\nVersion: 1.0\nRequires-Dist: torch==2.11.0\nRequires-Python: >=3.10\n",
        )
    kept = Cache(tmp_path / "cache").meta_path("ab" + "0" * 62)
    first = read_meta_kept(wheel, kept)
    assert first == DistMeta("demo", "1.0", ("torch==2.11.0",), ">=3.10")
    wheel.unlink()  # what one sha256 names never changes: the kept copy answers
    assert read_meta_kept(wheel, kept) == first
    assert kept.parent.name == "ab"  # two-character fan-out, as the file store
    kept.write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read its METADATA"):  # a bad copy is not trusted
        read_meta_kept(wheel, kept)
