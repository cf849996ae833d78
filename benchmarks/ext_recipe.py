"""Write the recipe of a profile's declared extension build, to run it in the image's tree on a host
with more cores (benchmarks/h200_image.sh extbuild): the very command and environment that
`verlenv build` runs in its container (verlenv.image.extbuild.recipe), the sdist's top folder, and
the job count for that host.

    python benchmarks/ext_recipe.py PROFILE NAME SDIST BUNDLE JOBS OUT.json
"""

from __future__ import annotations

import json
import sys
import tarfile
from pathlib import Path

from verlenv.accept.rootfs_run import ImageFacts
from verlenv.image.extbuild import recipe
from verlenv.paths import find_root
from verlenv.profiles.profile import load_profile


def main(argv: list[str]) -> int:
    profile_name, name, sdist, bundle, jobs, out = argv
    profile = load_profile(find_root(), profile_name)
    build = profile.build_of(name)
    if build is None:
        print(f"{profile_name} declares no build of {name}", file=sys.stderr)
        return 2
    with tarfile.open(sdist) as tar:
        top = tar.getmembers()[0].name.split("/")[0]
    command, env = recipe(build, dict(ImageFacts.from_bundle(Path(bundle)).env), top, int(jobs))
    Path(out).write_text(json.dumps({"top": top, "command": command, "env": env}, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
