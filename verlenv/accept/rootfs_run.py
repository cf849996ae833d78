"""Running the acceptance suite in an image's own root filesystem, on a host with no container engine.

What nvidia-container-toolkit and enroot do for a container, done for a tree: the tree is the root
(read-only: nothing a run writes can change what was certified), the host's /dev (GPUs, /dev/shm),
/proc and /sys are bound in, the directory holding the host's driver libraries (libcuda, libnvidia-ml:
they must match the kernel driver, so they always come from the host) is bound at /usr/local/nvidia/lib64
and put on LD_LIBRARY_PATH, /tmp is a fresh tmpfs and HOME a scratch folder for compile caches.
bubblewrap does the mounts; plain chroot in a private mount namespace is the fallback for root.
Before anything runs, the tree is compared with the image's per-file manifest, and the report carries
both the image ID and that manifest's digest.

Standard library only: this runs under the GPU host's own Python, beside the tree.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verlenv.image.filemanifest import FileManifest
from verlenv.image.rootfs import MANIFEST_NAME, Bundle, RootfsError, verify_tree

DRIVER_MOUNT = "/usr/local/nvidia/lib64"
DRIVER_LIBS = ("libcuda.so.1", "libnvidia-ml.so.1")
RUNNERS = ("bwrap", "chroot")


@dataclass(frozen=True)
class ImageFacts:
    """What the runner needs of the image: its ID, config environment and per-file manifest."""

    image_id: str
    env: tuple[tuple[str, str], ...]
    manifest: FileManifest

    @classmethod
    def from_bundle(cls, where: Path) -> ImageFacts:
        bundle = Bundle.from_json((where / MANIFEST_NAME).read_text())
        config = json.loads(bundle.config)
        env = tuple(tuple(item.split("=", 1)) for item in config["config"].get("Env", []))
        manifest = FileManifest.read(where / "files.gz")
        if manifest.sha256 != bundle.files_sha256:
            raise RootfsError(f"{where}/files.gz is not the manifest the bundle names")
        return cls(bundle.image_id, env, manifest)  # type: ignore[arg-type]


@dataclass(frozen=True)
class RunPlan:
    rootfs: Path
    scratch: Path
    runner: str
    env: dict[str, str]
    driver_dir: Path | None
    extra_binds: tuple[tuple[Path, str], ...] = field(default_factory=tuple)


def driver_dir() -> Path | None:
    """The host folder holding libcuda.so.1 (and NVML): nvidia's own mount point, else what ldconfig knows."""
    for candidate in (Path("/usr/local/nvidia/lib64"), Path("/usr/lib/x86_64-linux-gnu"), Path("/usr/lib64")):
        if (candidate / "libcuda.so.1").exists():
            return candidate
    try:
        listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return None
    for line in listing.splitlines():
        if "libcuda.so.1 " in line and "=>" in line:
            return Path(line.split("=>", 1)[1].strip()).parent
    return None


def pick_runner(wanted: str = "auto") -> str:
    if wanted in RUNNERS:
        if wanted == "bwrap" and not _bwrap():
            raise RootfsError("bwrap is not on PATH (Debian: apt-get install bubblewrap; or unpack its .deb)")
        return wanted
    if _bwrap():
        return "bwrap"
    if os.geteuid() == 0 and shutil.which("chroot") and shutil.which("unshare"):
        return "chroot"
    raise RootfsError("neither bwrap nor (as root) chroot + unshare is available to run the image's tree")


def _bwrap() -> str:
    return os.environ.get("VERLENV_BWRAP") or shutil.which("bwrap") or ""


def plan(rootfs: Path, image: ImageFacts, scratch: Path, runner: str, extra_env: dict[str, str]) -> RunPlan:
    drivers = driver_dir()
    env = dict(image.env)
    env.update(
        HOME="/root",
        VERLENV_IMAGE_ID=image.image_id,
        VERLENV_FILES_SHA256=image.manifest.sha256,
        NVIDIA_VISIBLE_DEVICES=os.environ.get("NVIDIA_VISIBLE_DEVICES", "all"),
        # never NVLink multicast on shared hosts; harmless elsewhere
        NCCL_NVLS_ENABLE=os.environ.get("NCCL_NVLS_ENABLE", "0"),
    )
    if drivers:
        env["LD_LIBRARY_PATH"] = ":".join(filter(None, [DRIVER_MOUNT, env.get("LD_LIBRARY_PATH", "")]))
        # the linker's path too: run-time JIT links -lcuda (the image's stubs/libcuda.so names libcuda.so.1)
        env["LIBRARY_PATH"] = ":".join(filter(None, [DRIVER_MOUNT, env.get("LIBRARY_PATH", "")]))
    env.update(extra_env)
    return RunPlan(rootfs, scratch, runner, env, drivers)


def prepare(plan: RunPlan) -> None:
    """Mount points the tree lacks (outside its identity), and the scratch folders."""
    (plan.rootfs / DRIVER_MOUNT.lstrip("/")).mkdir(parents=True, exist_ok=True)
    (plan.scratch / "home").mkdir(parents=True, exist_ok=True)


def bwrap_argv(plan: RunPlan, command: list[str]) -> list[str]:
    argv = [_bwrap(), "--ro-bind", str(plan.rootfs), "/", "--dev-bind", "/dev", "/dev"]
    argv += ["--bind", "/proc", "/proc", "--ro-bind", "/sys", "/sys", "--tmpfs", "/tmp"]
    argv += ["--bind", str(plan.scratch / "home"), "/root", "--chdir", "/root", "--die-with-parent"]
    if plan.driver_dir:
        argv += ["--ro-bind", str(plan.driver_dir), DRIVER_MOUNT]
    for source, dest in plan.extra_binds:
        argv += ["--bind", str(source), dest]
    argv.append("--clearenv")
    for key, value in sorted(plan.env.items()):
        argv += ["--setenv", key, value]
    return [*argv, *command]


def chroot_argv(plan: RunPlan, command: list[str]) -> list[str]:
    """unshare a private mount namespace, build the mounts, chroot: the mounts die with the process."""
    root = plan.scratch / "root"
    q = shlex.quote
    steps = [
        "set -e",
        f"mkdir -p {q(str(root))}",
        f"mount --bind {q(str(plan.rootfs))} {q(str(root))}",
        f"mount -o remount,bind,ro {q(str(root))}",
        f"mount --rbind /dev {q(str(root / 'dev'))}",
        f"mount --rbind /proc {q(str(root / 'proc'))}",
        f"mount --rbind /sys {q(str(root / 'sys'))}",
        f"mount -t tmpfs tmpfs {q(str(root / 'tmp'))}",
        f"mount --bind {q(str(plan.scratch / 'home'))} {q(str(root / 'root'))}",
    ]
    if plan.driver_dir:
        steps.append(f"mount --bind -o ro {q(str(plan.driver_dir))} {q(str(root) + DRIVER_MOUNT)}")
    for source, dest in plan.extra_binds:
        steps.append(f"mount --bind {q(str(source))} {q(str(root) + dest)}")
    env = " ".join(q(f"{k}={v}") for k, v in sorted(plan.env.items()))
    steps.append(
        f"cd / && exec chroot {q(str(root))} /usr/bin/env -i {env} sh -c 'cd /root && exec \"$@\"' sh "
        + " ".join(q(c) for c in command)
    )
    return ["unshare", "--mount", "--propagation", "private", "--fork", "sh", "-c", "\n".join(steps)]


def argv_for(plan: RunPlan, command: list[str]) -> list[str]:
    return bwrap_argv(plan, command) if plan.runner == "bwrap" else chroot_argv(plan, command)


def run_in_tree(plan: RunPlan, command: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    prepare(plan)
    return subprocess.run(argv_for(plan, command), capture_output=True, text=True, timeout=timeout_s, check=False)


def accept_in_tree(
    rootfs: Path,
    image: ImageFacts,
    scratch: Path,
    *,
    runner: str = "auto",
    suite_args: tuple[str, ...] = (),
    timeout_s: float = 3600.0,
) -> dict[str, Any]:
    """Prove the tree is the image's, run `verlenv accept` in it, and return its report with both
    the image ID and the manifest digest the run was made under."""
    started = time.monotonic()
    verify_tree(rootfs, image.manifest)
    verified_s = time.monotonic() - started
    chosen = pick_runner(runner)
    the_plan = plan(rootfs, image, scratch, chosen, {})
    # The report is read from the file, not stdout: vLLM logs to stdout (its default handler), so the
    # first vLLM runs in a tree (H200, 2026-12-04) passed with exit 0 and no parseable report.
    written = scratch / "home" / "acceptance.json"
    written.unlink(missing_ok=True)
    command = ["verlenv", "accept", "-q", "--report", "/root/acceptance.json", *suite_args]
    proc = run_in_tree(the_plan, command, timeout_s)
    try:
        report = json.loads(written.read_text())
    except (OSError, ValueError):
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-30:])
        raise RootfsError(
            f"the acceptance run in {rootfs} produced no report (exit {proc.returncode}):\n{tail}"
        ) from None
    report["image_id"] = image.image_id
    report["files_manifest_sha256"] = image.manifest.sha256
    report["ran_in"] = {"runner": chosen, "rootfs": str(rootfs), "verified_s": round(verified_s, 1)}
    return report


def main(argv: list[str] | None = None) -> int:
    """python3 -m verlenv.accept.rootfs_run BUNDLE ROOTFS SCRATCH [--runner R] -- SUITE ARGS"""
    args = argv if argv is not None else sys.argv[1:]
    if "--" in args:
        split = args.index("--")
        head, suite = args[:split], tuple(args[split + 1 :])
    else:
        head, suite = args, ()
    runner = "auto"
    if "--runner" in head:
        runner = head.pop(head.index("--runner") + 1)
        head.remove("--runner")
    if len(head) != 3:
        print(main.__doc__, file=sys.stderr)
        return 2
    report = accept_in_tree(
        Path(head[1]), ImageFacts.from_bundle(Path(head[0])), Path(head[2]), runner=runner, suite_args=suite
    )
    print(json.dumps(report, indent=1))
    return 0 if report.get("passed") else 1


if __name__ == "__main__":
    sys.exit(main())
