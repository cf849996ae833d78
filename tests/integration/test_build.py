"""The cpu-smoke image, built for real on the local engine, inspected from the outside and inside."""

from __future__ import annotations

import json
from pathlib import Path

import docker.errors
import jsonschema
import pytest

from tests.integration.conftest import run_in
from verlenv.errors import IntegrityError
from verlenv.image.build import BuildOptions, build_image
from verlenv.lock.lockfile import read_lock
from verlenv.paths import ProjectPaths
from verlenv.wheels.cache import Cache

SCHEMA = Path(__file__).resolve().parents[2] / "verlenv" / "schemas" / "doctor-1.schema.json"


def test_labels_carry_the_lock_and_versions(engine, cpu_smoke, project_copy: ProjectPaths) -> None:  # type: ignore[no-untyped-def]
    labels = engine.images.get(cpu_smoke.image_id).labels
    lock = read_lock(project_copy.lock("cpu-smoke"))
    assert labels["io.verlenv.lock-sha256"] == lock.sha256
    assert labels["io.verlenv.profile"] == "cpu-smoke"
    assert labels["io.verlenv.torch"] == "2.13.0+cpu" and labels["io.verlenv.verl"] == "0.9.1"
    assert labels["org.opencontainers.image.created"] == "2026-09-25T00:00:00Z"
    assert labels["org.opencontainers.image.version"] == lock.sha256[:12]
    assert f"verlenv/cpu-smoke:{lock.sha256[:12]}" in cpu_smoke.tags


def test_nvidia_runtime_variables_and_epoch_are_set(engine, cpu_smoke) -> None:  # type: ignore[no-untyped-def]
    env = dict(e.split("=", 1) for e in engine.images.get(cpu_smoke.image_id).attrs["Config"]["Env"])
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    assert env["SOURCE_DATE_EPOCH"] == "1790294400"


def test_manifest_inside_matches_the_lock(engine, cpu_smoke, project_copy: ProjectPaths) -> None:  # type: ignore[no-untyped-def]
    code, out = run_in(engine, cpu_smoke.image_id, "cat /opt/verlenv/manifest.json", stderr=False)
    assert code == 0
    manifest = json.loads(out)
    lock = read_lock(project_copy.lock("cpu-smoke"))
    assert manifest["lock_sha256"] == lock.sha256 and manifest["profile"] == "cpu-smoke"
    assert set(manifest["distributions"]) == {d.name for d in lock.dists} | {"verlenv"}
    assert list(manifest["layers"]) == ["torch", "deps", "verl", "verlenv"]
    assert "antlr4-python3-runtime" in manifest["built_from_sdist"]


def test_pip_check_torch_and_verlenv_work_inside(engine, cpu_smoke) -> None:  # type: ignore[no-untyped-def]
    code, out = run_in(
        engine,
        cpu_smoke.image_id,
        "pip check && python -c 'import torch; x = torch.arange(6.).reshape(2, 3); print(float((x @ x.T).sum()))'"
        " && python -c 'import verl; print(verl.__version__)' && verlenv --version",
    )
    assert code == 0, out
    assert "No broken requirements found." in out
    assert "83.0" in out  # [[0,1,2],[3,4,5]] @ its transpose = [[5,14],[14,50]], which sums to 83
    assert "0.9.1" in out and "verlenv 0.1.0" in out


def test_doctor_inside_exits_0_and_its_json_validates(engine, cpu_smoke) -> None:  # type: ignore[no-untyped-def]
    code, out = run_in(engine, cpu_smoke.image_id, "verlenv doctor --json", stderr=False, shm_size="1g")
    report = json.loads(out)
    jsonschema.validate(report, json.loads(SCHEMA.read_text()))
    assert code == 0, out
    statuses = {c["id"]: c["status"] for c in report["checks"]}
    assert statuses["manifest-drift"] == "ok" and statuses["elf-abi"] == "ok" and statuses["import-probe"] == "ok"


def test_doctor_with_dockers_default_shm_fails_with_the_fix(engine, cpu_smoke) -> None:  # type: ignore[no-untyped-def]
    code, out = run_in(engine, cpu_smoke.image_id, "verlenv doctor")
    assert code == 1
    assert "/dev/shm is 64 MiB" in out and "--ipc=host" in out


def test_no_wheels_caches_or_build_leftovers_in_the_image(engine, cpu_smoke, project_copy: ProjectPaths) -> None:  # type: ignore[no-untyped-def]
    lock_files = {d.name.replace("-", "_") for d in read_lock(project_copy.lock("cpu-smoke")).dists}
    _code, out = run_in(
        engine,
        cpu_smoke.image_id,
        "find / -xdev -name '*.whl' -o -xdev -path '*/.cache/pip*' -o -xdev -name 'requirements.txt' "
        "| grep -v -e '^/usr/share/python-wheels/' -e '/virtualenv/seed/wheels/embed/'; "
        "ls -d /wheels /layers 2>&1",
    )
    leftovers = [line for line in out.splitlines() if line.startswith("/") and "No such file" not in line]
    assert leftovers == [], leftovers
    assert "cannot access '/wheels'" in out and "cannot access '/layers'" in out
    assert lock_files  # the test would be vacuous on an empty lock


def test_the_build_runs_without_network(engine, cpu_smoke) -> None:  # type: ignore[no-untyped-def]
    from verlenv.image.install import run_offline

    # The same call every layer's install makes: the only interface it sees is loopback.
    code, out = run_offline(engine, cpu_smoke.image_id, "ls /sys/class/net", {}, {})
    assert code == 0 and out.split() == ["lo"]


def test_tampered_wheel_fails_the_build_naming_the_file_and_tags_nothing(  # type: ignore[no-untyped-def]
    engine, cpu_smoke, project_copy: ProjectPaths, cache: Cache, tmp_path: Path
) -> None:
    import os
    import shutil

    private = Cache(tmp_path / "cache")
    for folder in ("files", "layers"):  # the base layer and the others, so only the wheels are redone
        shutil.copytree(cache.root / folder, private.root / folder, copy_function=os.link)
    six = next((private.root / "files").glob("sha256/*/*/six-*.whl"))
    stat = six.stat()
    data = bytearray(six.read_bytes())
    data[-100] ^= 0xFF  # one flipped byte, same size...
    six.unlink()  # (break the hard link first: the shared cache stays intact)
    six.write_bytes(bytes(data))
    os.utime(six, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # ...and same mtime: only a re-hash can tell
    with pytest.raises(IntegrityError) as info:
        build_image(
            project_copy,
            "cpu-smoke",
            private,
            BuildOptions(quiet=True, nocache=True, extra_tags=("verlenv-test/tampered:x",)),
        )
    assert six.name in info.value.message and "nothing was built or tagged" in info.value.message
    with pytest.raises(docker.errors.ImageNotFound):
        engine.images.get("verlenv-test/tampered:x")


def test_changing_only_the_verl_pin_reuses_the_lower_layers(  # type: ignore[no-untyped-def]
    engine, cpu_smoke, project_copy: ProjectPaths, cache: Cache, tmp_path: Path
) -> None:
    from tests.helpers.variants import repin

    variant = repin(project_copy, tmp_path / "variant", "cpu-smoke", "verl", "0.9.0", cache)
    rebuilt = build_image(variant, "cpu-smoke", cache, BuildOptions(quiet=True))
    before = engine.images.get(cpu_smoke.image_id).attrs["RootFS"]["Layers"]
    after = engine.images.get(rebuilt.image_id).attrs["RootFS"]["Layers"]
    # base, venv, torch, deps are the same layers; verl (index 4) is not (then verlenv, self-check).
    assert len(before) == len(after) == 7
    assert before[:4] == after[:4]
    assert before[4] != after[4]
    assert engine.images.get(rebuilt.image_id).labels["io.verlenv.verl"] == "0.9.0"


def test_doctor_config_lints_against_the_images_own_verl(engine, cpu_smoke) -> None:  # type: ignore[no-untyped-def]
    config = (Path(__file__).resolve().parents[1] / "data" / "verl-configs" / "typos.yaml").read_text()
    code, out = run_in(
        engine,
        cpu_smoke.image_id,
        f"cat > /tmp/run.yaml <<'EOF'\n{config}EOF\nverlenv doctor --static --json --config /tmp/run.yaml "
        "trainer.logger=[console]",
        stderr=False,
    )
    assert code == 1, out
    check = next(c for c in json.loads(out)["checks"] if c["id"] == "config")
    assert check["status"] == "fail" and "verl 0.9.1" in check["summary"]
    assert any("did you mean 'trainer.total_epochs'" in d for d in check["details"])


def test_torch_compile_works_in_the_image(engine, cpu_smoke) -> None:  # type: ignore[no-untyped-def]
    """Inductor compiles C++ at run time: the image's own g++ and Python.h make it work."""
    program = (
        "import torch\n"
        "f = torch.compile(lambda x: torch.sin(x) * 2 + x.cos())\n"
        "x = torch.linspace(0, 1, 64)\n"
        "assert torch.allclose(f(x), torch.sin(x) * 2 + x.cos())\n"
        "print('COMPILED-OK')\n"
    )
    code, out = run_in(engine, cpu_smoke.image_id, f"python - <<'EOF'\n{program}EOF")
    assert code == 0 and "COMPILED-OK" in out, out[-3000:]


def test_doctor_fails_the_toolchain_check_in_an_image_without_compilers(engine, cpu_smoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """What every image was before: no C compiler and no Python.h. doctor --static must fail, with the fix."""
    context = tmp_path / "stripped"
    context.mkdir()
    strip = (
        "rm -f /usr/bin/gcc* /usr/bin/g++* /usr/bin/cc /usr/bin/c++ /usr/bin/x86_64-linux-gnu-g* "
        "&& rm -rf /usr/include/python3.11"
    )
    (context / "Dockerfile").write_text(f"FROM {cpu_smoke.image_id}\nRUN {strip}\n")
    image, _ = engine.images.build(path=str(context), network_mode="none", rm=True)
    try:
        code, out = run_in(engine, image.id, "verlenv doctor --static --json", stderr=False)
    finally:
        engine.images.remove(image.id, force=True)
    assert code == 1
    check = next(c for c in json.loads(out)["checks"] if c["id"] == "jit-toolchain")
    assert check["status"] == "fail" and "no C compiler (CC, gcc, clang)" in check["summary"]
    assert "apt-get install gcc" in check["fix"] and "InvalidCxxCompiler" in " ".join(check["details"])


IN_PLACE_UPGRADE = r"""
import base64, hashlib, zipfile
files = {"pylatexenc/__init__.py": b"__version__ = '2.99'\n"}
info = "pylatexenc-2.99.dist-info"
files[f"{info}/METADATA"] = b"Metadata-Version: 2.1\nName: pylatexenc\nVersion: 2.99\n"
files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
digest = lambda d: base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b"=").decode()
record = "".join(f"{p},sha256={digest(d)},{len(d)}\n" for p, d in files.items()) + f"{info}/RECORD,,\n"
files[f"{info}/RECORD"] = record.encode()
with zipfile.ZipFile("/tmp/pylatexenc-2.99-py3-none-any.whl", "w") as whl:
    for p, d in files.items():
        whl.writestr(p, d)
"""


def test_in_place_upgrade_inside_the_image_is_drift_and_leaves_leftovers(engine, cpu_smoke) -> None:  # type: ignore[no-untyped-def]
    """pip install of another version of a locked package, in place: doctor fails on drift, clean finds
    the old version's dist-info and files."""
    _, out = run_in(
        engine,
        cpu_smoke.image_id,
        f"python - <<'EOF'\n{IN_PLACE_UPGRADE}\nEOF\n"
        "pip install -q --no-index --no-deps --ignore-installed /tmp/pylatexenc-2.99-py3-none-any.whl"
        " && verlenv doctor --static --json > /tmp/doctor.json; echo doctor=$?;"
        " verlenv clean --check --json --no-caches > /tmp/clean.json; echo clean=$?;"
        " cat /tmp/doctor.json; echo '@@'; cat /tmp/clean.json",
    )
    assert "doctor=1" in out and "clean=1" in out, out
    doctor_text, clean_text = out.split("@@")
    doctor = json.loads(doctor_text[doctor_text.index("{") :])
    drift = next(c for c in doctor["checks"] if c["id"] == "manifest-drift")
    assert drift["status"] == "fail" and "changed: pylatexenc 2.11 -> 2.99" in drift["details"]
    found = json.loads(clean_text)["found"]
    kinds = {(f["kind"], f["path"].split("site-packages/")[1].split("/")[0]) for f in found}
    assert ("duplicate-dist-info", "pylatexenc-2.11.dist-info") in kinds
