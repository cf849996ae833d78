"""verlenv clean: list (and with --apply delete) stale artifacts of other versions."""

from __future__ import annotations

import argparse
import sysconfig
from pathlib import Path

from verlenv.inside import clean
from verlenv.output import print_json, table

NAME = "clean"
HELP = (
    "Find stale artifacts: files in a package's directory that no installed RECORD lists, duplicate "
    "*.dist-info, .pth/editable finders shadowing installed packages, orphan bytecode, and compile caches "
    "(vLLM, Triton, flashinfer, TorchInductor) written by other versions. Dry run by default; --apply "
    "deletes (and stamps the remaining caches with the installed versions); --check exits 1 when anything "
    "is found. Never deletes a RECORDed file or follows a symlink out of the environment."
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--apply", action="store_true", help="delete what is found")
    parser.add_argument("--check", action="store_true", help="exit 1 if anything is found (the build uses this)")
    parser.add_argument("--site", type=Path, help="site-packages to inspect (default: this interpreter's)")
    parser.add_argument("--no-caches", action="store_true", help="only site-packages, not the compile caches")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def execute(args: argparse.Namespace) -> int:
    from verlenv.image.manifest import load_manifest
    from verlenv.inside.installed import by_name

    site = args.site or Path(sysconfig.get_paths()["purelib"])
    roots = {} if args.no_caches else clean.default_cache_roots()
    versions = clean.cache_versions({n: d.version for n, d in by_name(site).items()})
    manifest = load_manifest()
    found = clean.find_stale(site, roots, versions, manifest.added if manifest else {})
    removed = clean.apply(found, site, roots) if args.apply else []
    if args.apply:  # what is left now belongs to the installed versions: say so for next time
        clean.stamp_caches(roots, versions)
    if args.json:
        print_json(
            {
                "site": str(site),
                "removed": [str(p) for p in removed],
                "found": [{"path": str(s.path), "kind": s.kind, "reason": s.reason, "fix": s.fix} for s in found],
            }
        )
    elif found:
        print(table(["kind", "path", "reason"], [[s.kind, str(s.path), s.reason] for s in found]))
        print(
            f"\n{len(found)} stale artifact(s)"
            + (f"; {len(removed)} removed" if args.apply else "; dry run: --apply removes them")
        )
    else:
        print(f"clean: nothing stale in {site}" + ("" if args.no_caches else " or the compile caches"))
    return 1 if args.check and found else 0
