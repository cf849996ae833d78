"""Write the recipe of a profile's declared extension build, to run it in the image's tree on a host
with more cores (benchmarks/h200_image.sh extbuild): the very command and environment that
`verlenv build` runs in its container (verlenv.image.extbuild.recipe), the sdist's top folder, and
the job count for that host.

    python benchmarks/ext_recipe.py PROFILE NAME SDIST BUNDLE JOBS OUT.json [TARGETS]

TARGETS (a file, one object path under /build per line): compile only those, with ninja over the
build.ninja that a build here wrote (carried beside the recipe), for a build split across hosts by
target and joined again with benchmarks/ninja_merge.py; the wheel is then made here. The compile
commands are build.ninja's own, run with the recipe's environment and cudafe++'s pinned PID.
"""

from __future__ import annotations

import json
import shlex
import sys
import tarfile
from pathlib import Path

from verlenv.accept.rootfs_run import ImageFacts
from verlenv.image.extbuild import pin_pid, recipe
from verlenv.paths import find_root
from verlenv.profiles.profile import load_profile


def main(argv: list[str]) -> int:
    profile_name, name, sdist, bundle, jobs, out, *targets = argv
    profile = load_profile(find_root(), profile_name)
    build = profile.build_of(name)
    if build is None:
        print(f"{profile_name} declares no build of {name}", file=sys.stderr)
        return 2
    with tarfile.open(sdist) as tar:
        top = tar.getmembers()[0].name.split("/")[0]
    command, env = recipe(build, dict(ImageFacts.from_bundle(Path(bundle)).env), top, int(jobs))
    if targets:
        command = _ninja_only(top, Path(targets[0]).read_text().split(), int(jobs))
    Path(out).write_text(json.dumps({"top": top, "command": command, "env": env}, indent=1, sort_keys=True))
    return 0


def _ninja_only(top: str, objects: list[str], jobs: int) -> str:
    folder = next(p for p in Path(objects[0]).parents if p.name.startswith("temp."))  # build.ninja's folder
    names = " ".join(shlex.quote(o) for o in objects)
    return f"cd /build/src/{top} && {pin_pid()} && cd {shlex.quote(str(folder))} && ninja -v -j {jobs} {names}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
