"""verlenv accept-image: run the acceptance suite inside a profile's image, through the Docker engine or
in the image's own root filesystem on a host with no engine."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from verlenv.errors import CheckFailed, IntegrityError

NAME = "accept-image"
HELP = (
    "Run `verlenv accept` inside the profile's built image and store the report under "
    "<cache>/acceptance/<image-id>.json, where publish looks for it. Through the Docker engine by default (GPUs "
    "requested when the host has them, --shm-size 8g, no network). With --rootfs DIR --bundle PACK, on a host "
    "with no engine (HPC GPU nodes): DIR must be exactly the image's tree (checked file by file against the "
    "per-file manifest in PACK, from `verlenv rootfs pack`); the suite then runs in it with bubblewrap (or "
    "chroot, as root), the host's /dev, /proc, /sys and driver libraries bound in, the tree read-only; the "
    "report carries the image ID and the manifest's digest. Exit 1 when the suite fails, 6 when the tree differs."
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    from verlenv.commands.options import add_cache_option, add_profile_option

    add_profile_option(parser, "profile whose image to accept")
    parser.add_argument("--image", default="", help="image reference (default: verlenv/<profile>:<lock sha256[:12]>)")
    parser.add_argument("--gpus", choices=("auto", "all", "none"), default="auto", help="request GPUs (default: auto)")
    parser.add_argument("--rootfs", type=Path, help="run in this tree of the image instead of a container")
    parser.add_argument(
        "--bundle", type=Path, help="with --rootfs: the `rootfs pack` folder (image ID, config, manifest)"
    )
    parser.add_argument("--runner", choices=("auto", "bwrap", "chroot"), default="auto", help="with --rootfs")
    parser.add_argument("--scratch", type=Path, help="with --rootfs: writable HOME and mounts (default: a temp dir)")
    parser.add_argument("--report-out", type=Path, help="also write the report here (to carry it to the build host)")
    add_cache_option(parser)
    parser.add_argument("suite_args", nargs=argparse.REMAINDER, help="after --: arguments for `verlenv accept`")


def execute(args: argparse.Namespace) -> int:
    from verlenv.accept.suite import summary

    extra = tuple(a for a in args.suite_args if a != "--")
    report, target = _in_tree(args, extra) if args.rootfs else _in_engine(args, extra)
    if args.report_out:
        args.report_out.write_text(json.dumps(report, indent=2) + "\n")
    print(summary(report))
    print(f"report: {target}")
    if not report["passed"]:
        raise CheckFailed("the acceptance run failed", hint=f"details in {target}")
    return 0


def _in_engine(args: argparse.Namespace, extra: tuple[str, ...]):  # type: ignore[no-untyped-def]
    from verlenv.accept.image import accept_image
    from verlenv.commands.options import cache_of, profile_of
    from verlenv.paths import find_root

    paths = find_root()
    name = profile_of(args, paths)
    return accept_image(paths, name, cache_of(args), image=args.image, gpus=args.gpus, args=extra)


def _in_tree(args: argparse.Namespace, extra: tuple[str, ...]):  # type: ignore[no-untyped-def]
    import tempfile

    from verlenv.accept.image import store_report
    from verlenv.accept.rootfs_run import ImageFacts, accept_in_tree
    from verlenv.commands.options import cache_of
    from verlenv.errors import ConfigError
    from verlenv.image.rootfs import RootfsError

    if args.bundle is None:
        raise ConfigError("--rootfs needs --bundle: the `verlenv rootfs pack` folder that says what the tree must be")
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="verlenv-accept-"))
    try:
        image = ImageFacts.from_bundle(args.bundle)
        report = accept_in_tree(args.rootfs, image, scratch, runner=args.runner, suite_args=extra)
    except RootfsError as exc:
        raise IntegrityError(str(exc)) from None
    return report, store_report(cache_of(args), report)
