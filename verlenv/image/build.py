"""The build stage: a bit-for-bit reproducible image from the verified wheelhouse, tagged only after
it self-checked and only when it is the image its inputs must give.

Order: refuse what must be refused (stale lock, missing or failed verify report, a base verlenv
cannot assemble); make or reuse the Debian base layer; turn sdists into wheels; install each layer's
wheels offline in a container of the base and write the layer as a normalized tar (layers already
made from the same inputs are reused from the store); write the config; load the image; run the
self-check in it and keep its ELF record as a last layer; compare with lockfiles/NAME.image.json
(and --expect); tag.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import sys
import tarfile
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from verlenv import __version__
from verlenv.errors import CheckFailed, ConfigError, IntegrityError
from verlenv.image import expected, install, oci
from verlenv.image.base import BaseImage, make_base
from verlenv.image.context import VENV, group_layers, source_date_epoch, source_sha256
from verlenv.image.filemanifest import FileManifest, merge
from verlenv.image.layerstore import LayerStore, StoredLayer
from verlenv.image.manifest import DEFAULT_PATH, Manifest
from verlenv.image.ownwheel import verlenv_wheel
from verlenv.image.preload import Preloader
from verlenv.image.services import ensure_engine
from verlenv.image.tarlayer import DIR, FILE, SYMLINK, Entry, Item, write_layer
from verlenv.lock.lockfile import Lock, read_lock
from verlenv.paths import ProjectPaths
from verlenv.profiles.profile import ExtensionBuild, Profile
from verlenv.verify.report import require_verified
from verlenv.wheels.cache import Cache, sha256_of
from verlenv.wheels.sdists import as_wheels
from verlenv.wheels.wheelhouse import HouseFile, fill, target_tags

# Both run, at once (clean's scan beside doctor's import probe); clean's output follows doctor's, and
# either failing fails the check. Doctor skips its stale-artifacts check: that is the scan clean --check
# makes (the same find_stale), and clean's finding fails the build where doctor's would only warn.
SELF_CHECK = (
    'said=$(mktemp); verlenv clean --check > "$said" 2>&1 & clean=$!; '
    "verlenv doctor --static --write-elf-cache --skip stale-artifacts; doctor=$?; "
    'wait $clean; cleaned=$?; cat "$said"; rm -f "$said"; '
    '[ "$doctor" = 0 ] && [ "$cleaned" = 0 ]'
)


@dataclass(frozen=True)
class BuildOptions:
    allow_unpinned_base: bool = False
    quiet: bool = False
    nocache: bool = False
    extra_tags: tuple[str, ...] = ()
    expect: str = ""  # sha256:... the image must come out as (a published image, re-derived)
    record: bool = True  # write lockfiles/NAME.image.json when its inputs changed
    ext_wheels: tuple[Path, ...] = ()  # declared extensions' wheels built elsewhere, checked and kept


@dataclass(frozen=True)
class BuildResult:
    profile: str
    image_id: str
    tags: tuple[str, ...]
    size: int
    timings: dict[str, float] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    diff_ids: tuple[str, ...] = ()
    files_sha256: str = ""
    record: str = ""  # what happened to lockfiles/NAME.image.json: matched | written | unchanged


@dataclass(frozen=True)
class NamedLayer:
    name: str
    stored: StoredLayer
    key: str


class _Timer:
    def __init__(self) -> None:
        self.timings: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.monotonic() - started


def image_repository(profile: str) -> str:
    return f"verlenv/{profile.lower()}"


def record_path(paths: ProjectPaths, name: str) -> Path:
    return paths.lockfiles / f"{name}.image.json"


def files_manifest_path(cache: Cache, image_id: str) -> Path:
    return cache.root / "images" / f"{image_id.removeprefix('sha256:')}.files.gz"


def config_path(cache: Cache, image_id: str) -> Path:
    """The config bytes an image's ID is the digest of: with the layer store, enough to rebuild the
    image anywhere (`verlenv rootfs`), engine or not."""
    return cache.root / "images" / f"{image_id.removeprefix('sha256:')}.config.json"


def _keep(cache: Cache, image_id: str, config: bytes, layers: list[StoredLayer]) -> FileManifest:
    """Keep the config and per-file manifest of a loaded image beside the layer store."""
    files_manifest = merge([layer.entries() for layer in layers])
    files_manifest.write(files_manifest_path(cache, image_id))
    config_path(cache, image_id).write_bytes(config)
    return files_manifest


def build_image(paths: ProjectPaths, name: str, cache: Cache, options: BuildOptions) -> BuildResult:
    timer = _Timer()
    with ThreadPoolExecutor(max_workers=1) as pool:
        # `uv build` of verlenv (~1 s, most of a verlenv-only rebuild's wheel stage) beside the checks and base
        own = pool.submit(_own_wheel, paths, name, cache)
        with timer.stage("checks"):
            profile, lock, verify_sha = _preflight(paths, name, options)
        epoch = source_date_epoch(lock.header.exclude_newer)
        with timer.stage("base"):
            base = make_base(paths.bases, profile.base.name, cache, quiet=options.quiet)
        with timer.stage("wheels"):
            files = [*_wheels(paths, profile, lock, cache), own.result()]
    store = LayerStore(cache)
    client = ensure_engine()
    pip = install.pip_of(files)
    installer = install.Installer(
        client, base.reference, base.layer.diff_id, pip, epoch, store, options.nocache, _reporter(options.quiet)
    )
    env = _env(profile, files, epoch)
    if options.ext_wheels:
        _adopt(paths, profile, files, base, dict(env), cache, options)
    if profile.builds:  # a cached built wheel installs with its layer's first pass, not after the others
        files = _cached_builds(profile, files, base, dict(env), cache)
    with Preloader(client, profile.name, epoch) as preloader:
        ready = partial(_offer_prefix, preloader, base, ["venv", *group_layers(profile, files)])
        with timer.stage("layers"):
            done = _install(profile, files, installer, cache, {}, None, options.quiet, ready)
        if any(not h.is_wheel for h in files):
            with timer.stage("extensions"):
                lower = partial(_build_env_layers, profile, files, installer, cache, done)
                files = _extensions(paths, profile, files, base, lower, dict(env), cache, options.quiet)
        if profile.builds:
            with timer.stage("checks"):
                verify_sha = _reverify(paths, profile.name, cache)
        manifest = _manifest(profile, lock, verify_sha, files, base, epoch)
        with timer.stage("layers"):
            done = _install(profile, files, installer, cache, done, manifest, options.quiet, ready)
            layers = [done["venv"], *(done[name] for name in group_layers(profile, files))]
        spec = oci.ImageSpec(env=env, labels=_labels(profile, lock, verify_sha, base, paths), epoch=epoch)
        with timer.stage("load"):
            preloader.wait()
            first = _stack(base, layers)
            seeded = [*first, *_previous_record(paths, profile.name, store)]
            checked = oci.load(client, oci.config_bytes(spec, seeded), seeded)
    with ThreadPoolExecutor(max_workers=1) as pool, timer.stage("self-check"):
        # the files manifest reads every layer's entries (about a second): done while the container runs
        pool.submit(lambda: [stored.entries() for stored in (base.layer, *(done.stored for done in layers))])
        record_layer = _self_check(client, checked, store, epoch, options.quiet)
    with timer.stage("load"):
        final = [*first, oci.Layer(record_layer.diff_id, record_layer.path, "verlenv self-check: ELF record")]
        config = oci.config_bytes(spec, final)
        image_id = oci.load(client, config, final)
        _forget(client, checked, keep=image_id)
    named = [*layers, NamedLayer("self-check", record_layer, "")]
    files_manifest = _keep(cache, image_id, config, [base.layer, *(layer.stored for layer in named)])
    with timer.stage("record"):
        record = _image_record(profile, lock, config, image_id, base, named, files_manifest.sha256)
        try:
            outcome = _check_record(paths, record, named, store, options)
        except IntegrityError:
            _forget(client, image_id)
            raise
    with timer.stage("tag"):
        tags = _tag(client, image_id, profile, lock, options)
    size = int(client.images.get(image_id).attrs.get("Size", 0))
    diff_ids = tuple(layer.diff_id for layer in final)
    return BuildResult(
        name, image_id, tags, size, timer.timings, dict(spec.labels), diff_ids, files_manifest.sha256, outcome
    )


def _own_wheel(paths: ProjectPaths, name: str, cache: Cache) -> HouseFile:
    """verlenv's wheel, made with the lock's SOURCE_DATE_EPOCH (read here: the checks read the lock too)."""
    return verlenv_wheel(paths, cache, source_date_epoch(read_lock(paths.lock(name)).header.exclude_newer))


def _preflight(paths: ProjectPaths, name: str, options: BuildOptions) -> tuple[Profile, Lock, str]:
    profile, lock, verify_sha = require_verified(paths, name, f"refusing to build {name}")
    if profile.base.kind == "registry" and not profile.base.pinned and not options.allow_unpinned_base:
        raise ConfigError(
            f"refusing to build {name}: base '{profile.base.name}' ({profile.base.image}) is not pinned by digest",
            hint="add digest = \"sha256:...\" to it in images/bases.toml (README: 'Base images'), "
            "or pass --allow-unpinned-base knowingly",
        )
    if profile.base.kind != "debian":
        raise ConfigError(
            f"refusing to build {name}: base '{profile.base.name}' is a registry image; verlenv assembles images "
            "from layers it writes itself, and a registry base's layers would come from outside that process",
            hint="use a debian base from images/bases.toml (they carry the toolchain and RDMA userspace too)",
        )
    return profile, lock, verify_sha


def _wheels(paths: ProjectPaths, profile: Profile, lock: Lock, cache: Cache) -> list[HouseFile]:
    # Missing files are fetched (and hash-checked) first; installing has no network.
    house = fill(profile, lock, cache, quiet=True)
    tags = target_tags(profile.python, profile.platform)
    # A declared extension stays an sdist here: it is built against the image's own lower layers.
    return as_wheels(
        list(house.files), cache, tags, profile.python, paths, keep=lambda f: profile.build_of(f.name) is not None
    )


def _manifest(
    profile: Profile, lock: Lock, verify_sha: str, files: list[HouseFile], base: BaseImage, epoch: int
) -> Manifest:
    locked = {h for d in lock.dists for h in d.hashes}
    return Manifest(
        profile=profile.name,
        lock_sha256=lock.sha256,
        verify_sha256=verify_sha,
        source_date_epoch=epoch,
        components={**dict(profile.components), "cuda": profile.cuda, "python": profile.python},
        distributions={f.name: f.version for f in sorted(files, key=lambda f: f.name)},
        layers={layer: [h.name for h in items] for layer, items in group_layers(profile, files).items()},
        base={"name": profile.base.name, "reference": base.reference, "glibc": base.facts.glibc},
        verlenv_version=__version__,
        # Wheels whose hash is not in the lock: built here from a locked sdist, or verlenv itself.
        built_from_sdist={f.name: f.sha256 for f in files if f.sha256 not in locked and f.name != "verlenv"},
        overrides=profile.override_reasons,
        waivers=dict(profile.waivers),
        added=_declared(_cuda_link_items(files, profile.python)),
    )


def _declared(items: tuple[Item, ...]) -> dict[str, str]:
    found = {}
    for item in items:
        entry = item.entry
        if entry.kind == FILE:
            found["/" + entry.path] = f"sha256:{entry.sha256}"
        elif entry.kind == SYMLINK:
            found["/" + entry.path] = f"symlink:{entry.target}"
    return found


def _install(
    profile: Profile,
    files: list[HouseFile],
    installer: install.Installer,
    cache: Cache,
    done: dict[str, NamedLayer],
    manifest: Manifest | None,
    quiet: bool,
    ready: Callable[[dict[str, NamedLayer]], None] = lambda _: None,
) -> dict[str, NamedLayer]:
    """Install every layer not yet done whose wheels all exist; verlenv's only once the manifest does.
    Two at a time: the small layers install while the torch layer's 4 GiB are written. ``ready`` hears
    of each finished layer, in stack order."""
    done = dict(done) or {"venv": NamedLayer("venv", install.venv_layer(installer, cache), "venv")}
    todo = [
        (name, items)
        for name, items in group_layers(profile, files).items()
        if name not in done and all(h.is_wheel for h in items) and not (name == "verlenv" and manifest is None)
    ]

    def one(job: tuple[str, tuple[HouseFile, ...]]) -> NamedLayer:
        name, items = job
        extra: tuple[Item, ...] = ()
        if name == "verlenv" and manifest:
            extra = (*_manifest_items(manifest), *_cuda_link_items(files, profile.python))
        size = sum(h.path.stat().st_size for h in items)
        _say(f"layer {name}: {len(items)} wheel(s), {size / 2**30:.2f} GiB", quiet)
        stored = install.wheels_layer(installer, cache, name, items, extra)
        _say(f"layer {name}: {stored.diff_id[:19]} ({stored.size / 2**30:.2f} GiB)", quiet)
        return NamedLayer(name, stored, name)

    with ThreadPoolExecutor(max_workers=2) as pool:
        for layer in pool.map(one, todo):
            done[layer.name] = layer
            ready(done)
    return done


def _offer_prefix(preloader: Preloader, base: BaseImage, order: list[str], done: dict[str, NamedLayer]) -> None:
    """The longest run of finished layers from the bottom of the stack, to load while the rest install."""
    prefix: list[NamedLayer] = []
    for name in order:
        if name not in done:
            break
        prefix.append(done[name])
    preloader.offer(_stack(base, prefix))


def _cached_builds(
    profile: Profile, files: list[HouseFile], base: BaseImage, env: dict[str, str], cache: Cache
) -> list[HouseFile]:
    """Each declared build's wheel in place of its sdist where the cache has it for these inputs."""
    from verlenv.image import extbuild

    probe = extbuild.BuildEnv("", env, _build_inputs(files, base))
    swapped = []
    for house in files:
        build = profile.build_of(house.name)
        found = None if build is None or house.is_wheel else extbuild.cached_wheel(build, house, probe, cache)
        swapped.append(found or house)
    return swapped


def _adopt(
    paths: ProjectPaths,
    profile: Profile,
    files: list[HouseFile],
    base: BaseImage,
    env: dict[str, str],
    cache: Cache,
    options: BuildOptions,
) -> None:
    """--ext-wheel: wheels of declared extensions built elsewhere from the same recipe (benchmarks/
    h200_image.sh extbuild), checked against lockfiles/NAME.builds.json and kept as if built here."""
    from verlenv.image import extbuild
    from verlenv.wheels.builtrecord import builds_path

    env_here = extbuild.BuildEnv("", env, _build_inputs(files, base))
    sdists = {h.name: h for h in files if not h.is_wheel}
    for wheel in options.ext_wheels:
        build = _declared_build_of(profile, wheel)
        sdist = sdists.get(build.name)
        if sdist is None:
            raise ConfigError(
                f"--ext-wheel {wheel}: {profile.name} locks no sdist of {build.pin}", hint="verlenv lock first"
            )
        outcome = extbuild.adopt(build, sdist, env_here, cache, builds_path(paths, profile.name), wheel)
        _say(f"{wheel.name}: {outcome}; kept for {build.pin}", False)  # even with -q/--json: a trust decision


def _declared_build_of(profile: Profile, wheel: Path) -> ExtensionBuild:
    """The declared build ``wheel`` is a wheel of, for this profile's Python: else a clear refusal."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    if not wheel.is_file():
        raise ConfigError(f"--ext-wheel {wheel}: no such file")
    try:
        name, version, _, tags = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename as exc:
        raise ConfigError(f"--ext-wheel {wheel}: not a wheel's file name ({exc})") from None
    build = profile.build_of(name)
    declared = ", ".join(b.pin for b in profile.builds) or "none"
    if build is None or str(version) != build.version:
        raise ConfigError(
            f"--ext-wheel {wheel}: {name}=={version} is not an extension {profile.name} builds (declared: {declared})"
        )
    python = "cp" + profile.python.replace(".", "")
    if not any(t.interpreter in (python, "py3") for t in tags):
        raise ConfigError(f"--ext-wheel {wheel}: not a wheel for {python}, the Python of {profile.name}")
    return build


def _extensions(
    paths: ProjectPaths,
    profile: Profile,
    files: list[HouseFile],
    base: BaseImage,
    lower: Callable[[], list[NamedLayer]],
    env: dict[str, str],
    cache: Cache,
    quiet: bool,
) -> list[HouseFile]:
    """Build the profile's declared extensions that `_cached_builds` left as sdists, in an image of
    its lower layers; return the files with each built wheel in place of its sdist. Only an uncached
    wheel gets here, so only then is the ~8 GiB build environment made and loaded (loading it cost a
    cold default build 94 s for a wheel it then found)."""
    from verlenv.image import extbuild
    from verlenv.wheels.builtrecord import builds_path

    todo = [(h, b) for h in files if (b := profile.build_of(h.name)) and not h.is_wheel]
    if not todo:
        return files
    image_id = _load_build_env(profile, base, lower(), env, cache)
    build_env = extbuild.BuildEnv(image_id, env, _build_inputs(files, base))
    client = ensure_engine()
    built = {
        h.name: extbuild.built_wheel(client, b, h, build_env, cache, builds_path(paths, profile.name), quiet)
        for h, b in todo
    }
    return [built.get(h.name, h) for h in files]


def _load_build_env(
    profile: Profile, base: BaseImage, done: list[NamedLayer], env: dict[str, str], cache: Cache
) -> str:
    stack = _stack(base, done)
    spec = oci.ImageSpec(env=tuple(env.items()), labels=(("io.verlenv.build-env", profile.name),), epoch=0)
    config = oci.config_bytes(spec, stack)
    image_id = oci.load(ensure_engine(), config, stack)
    # kept like a built image, so `verlenv rootfs pack --image` can carry it to a host with more cores
    _keep(cache, image_id, config, [base.layer, *(layer.stored for layer in done)])
    return image_id


def _build_env_layers(
    profile: Profile, files: list[HouseFile], installer: install.Installer, cache: Cache, done: dict[str, NamedLayer]
) -> list[NamedLayer]:
    """venv, torch, torch-extras and deps as the build environment; a layer that waits for a built
    wheel (an extension with no layer pattern lands in deps) goes in without it, as its own layer."""
    groups = group_layers(profile, files)
    lower = [done["venv"]]
    for name in ("torch", "torch-extras", "deps"):
        if name in done:
            lower.append(done[name])
        elif name in groups:
            wheels = tuple(h for h in groups[name] if h.is_wheel)
            lower.append(NamedLayer(f"{name}-for-build", install.wheels_layer(installer, cache, name, wheels), ""))
    return lower + _cuda_link_layer(files, profile.python, installer)


def _cuda_link_layer(files: list[HouseFile], python: str, installer: install.Installer) -> list[NamedLayer]:
    """The image's CUDA link entries under the build environment too: torch's cpp_extension links
    every CUDA extension with -lcudart, which pip's CUDA (libcudart.so.13 only) cannot satisfy; the
    flash-attn build compiled all 73 objects here and then failed at `ld: cannot find -lcudart`."""
    items = _cuda_link_items(files, python)
    if not items:
        return []
    key = installer.key("cuda-link", "".join(f"{i.entry.line()}\n" for i in items))
    return [NamedLayer("cuda-link-for-build", _items_layer(installer.store, key, items, installer.epoch), "")]


def _items_layer(store: LayerStore, key: str, items: Iterable[Item], epoch: int) -> StoredLayer:
    """A layer written from ``items`` here (no container), from the store when ``key`` was written before."""
    found = store.find(key)
    if found is not None:
        return found
    staged = store.staging(key.split("-")[0])
    return store.put(key, staged, write_layer(items, staged, epoch))


def _reverify(paths: ProjectPaths, name: str, cache: Cache) -> str:
    """The verify report again, now that the built wheels exist: their extensions are ELF-checked
    against torch before they go into the image, and the image's label names the report that did."""
    from verlenv.verify.report import verify_profile, write_report

    report = verify_profile(paths, name, cache, quiet=True)
    write_report(report, paths.verify_report(name))
    if not report.ok:
        raise CheckFailed(
            f"refusing to build {name}: verify fails once the built wheels are checked",
            hint=f"verlenv verify --profile {name} -v",
        )
    return sha256_of(paths.verify_report(name))


# What an extension build is compiled with, by sha256: torch (its version, CUDA and C++ ABI), the
# CUDA compiler and headers, the build tools; plus the base's Python and gcc, by Debian version.
_BUILD_TOOLS = (
    "torch",
    "nvidia-cuda-nvcc",
    "nvidia-nvvm",
    "nvidia-cuda-crt",
    "nvidia-cuda-cccl",
    "nvidia-cuda-runtime",
    "setuptools",
    "wheel",
    "ninja",
    "pip",
    "packaging",
    "psutil",
)
_BASE_TOOLS = ("python3.11", "libpython3.11-dev", "gcc-12", "g++-12", "libc6-dev", "libstdc++-12-dev")


def _build_inputs(files: list[HouseFile], base: BaseImage) -> dict[str, str]:
    inputs = {f.name: f"{f.version} sha256:{f.sha256}" for f in files if f.name in _BUILD_TOOLS}
    for line in base.debs:
        name, version = line.split()[:2]
        if name in _BASE_TOOLS:
            inputs[f"deb:{name}"] = version
    return dict(sorted(inputs.items()))


def _previous_record(paths: ProjectPaths, name: str, store: LayerStore) -> list[oci.Layer]:
    """The last build's ELF record, on top of the image the self-check runs in (never in the image
    itself): doctor then re-reads only the shared objects whose size or mtime changed, and writes the
    same record a full scan would."""
    committed = expected.read(record_path(paths, name))
    last = committed.layers[-1] if committed and committed.layers else None
    stored = store.by_diff_id(last.diff_id) if last and last.name == "self-check" else None
    return [oci.Layer(stored.diff_id, stored.path, "the previous ELF record")] if stored else []


def _manifest_items(manifest: Manifest) -> tuple[Item, ...]:
    data = manifest.to_json().encode()
    folder = str(DEFAULT_PATH.parent).lstrip("/")
    entry = Entry(str(DEFAULT_PATH).lstrip("/"), FILE, 0o644, size=len(data), sha256=hashlib.sha256(data).hexdigest())
    return (Item(Entry("opt", DIR, 0o755)), Item(Entry(folder, DIR, 0o755)), Item(entry, lambda: io.BytesIO(data)))


LIBCUDA_SCRIPT = b"INPUT(-l:libcuda.so.1)\n"


def _cuda_link_items(files: list[HouseFile], python: str) -> tuple[Item, ...]:
    """What FlashInfer's JIT links with (-L$CUDA_HOME/lib64 -L$CUDA_HOME/lib64/stubs -lcudart -lcuda)
    and pip's CUDA lacks: lib64, an unversioned libcudart.so, and a libcuda.so. That one is a linker
    script naming the driver's libcuda.so.1, found where the container runtime put it (a default
    library folder, or LIBRARY_PATH): a symlink could point at only one of those places."""
    home, runtime = _cuda_home(files, python).lstrip("/"), _minor(files, "nvidia-cuda-runtime")
    if not home or not runtime:
        return ()
    return cuda_link_entries(home, runtime.split(".")[0])


def cuda_link_entries(home: str, major: str) -> tuple[Item, ...]:
    digest = hashlib.sha256(LIBCUDA_SCRIPT).hexdigest()
    return (
        Item(Entry(f"{home}/lib", DIR, 0o755)),
        Item(Entry(f"{home}/lib64", SYMLINK, 0o777, target="lib")),
        Item(Entry(f"{home}/lib/libcudart.so", SYMLINK, 0o777, target=f"libcudart.so.{major}")),
        Item(Entry(f"{home}/lib/stubs", DIR, 0o755)),
        Item(
            Entry(f"{home}/lib/stubs/libcuda.so", FILE, 0o644, len(LIBCUDA_SCRIPT), digest),
            lambda: io.BytesIO(LIBCUDA_SCRIPT),
        ),
    )


def _stack(base: BaseImage, layers: list[NamedLayer]) -> list[oci.Layer]:
    stack = [oci.Layer(base.layer.diff_id, base.layer.path, f"verlenv base {base.name}")]
    stack += [oci.Layer(layer.stored.diff_id, layer.stored.path, f"verlenv layer {layer.name}") for layer in layers]
    return stack


def _env(profile: Profile, files: list[HouseFile], epoch: int) -> tuple[tuple[str, str], ...]:
    env = [
        ("VIRTUAL_ENV", VENV),
        ("PATH", f"{VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
        ("LANG", "C.UTF-8"),
        ("PYTHONUNBUFFERED", "1"),
        ("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
        ("NVIDIA_VISIBLE_DEVICES", "all"),
        ("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"),
        ("SOURCE_DATE_EPOCH", str(epoch)),
        ("VERLENV_MANIFEST", str(DEFAULT_PATH)),
    ]
    cuda_home = _cuda_home(files, profile.python)
    if cuda_home:
        # FlashInfer, DeepGEMM and torch's cpp_extension find nvcc through CUDA_HOME: the locked one.
        env.append(("CUDA_HOME", cuda_home))
        if _minor(files, "nvidia-cuda-nvcc") != _minor(files, "nvidia-cuda-runtime"):
            # The lock mixes minors (torch pins the 13.0 runtime, cuda-tile[tileiras] wants nvcc 13.2):
            # CCCL then refuses every CUDA file that includes it. Its own escape hatch, recorded in the
            # config; doctor's jit-toolchain check says so.
            env.append(("NVCC_APPEND_FLAGS", "-DCCCL_DISABLE_CTK_COMPATIBILITY_CHECK"))
    cudart = _cudart_dir(files, profile.python)
    if cudart and any(f.name in PRELOADS_CUDART for f in files):
        # A library given to LD_PRELOAD is loaded before any RPATH of torch's can find libcudart for
        # it: SGLang's scheduler, started with torch_memory_saver's hook, died at exec with
        # "python3: ... libcudart.so.13: cannot open shared object file" (H100, 2026-12-07).
        env.append(("LD_LIBRARY_PATH", cudart))
    return tuple(env)


PRELOADS_CUDART = ("torch-memory-saver",)  # LD_PRELOAD hooks that need libcudart.so.N (DT_NEEDED, no RUNPATH)
_CUDART = re.compile(r"^(nvidia/.+/lib)/libcudart\.so\.\d+$")
_NVCC = re.compile(r"^(.+)/bin/nvcc$")


def _cudart_dir(files: list[HouseFile], python: str) -> str:
    """The folder the locked CUDA runtime wheel puts libcudart.so.N in (nvidia/cu13/lib, nvidia/cuda_runtime/lib)."""
    runtime = next((f for f in files if f.name.startswith("nvidia-cuda-runtime") and f.is_wheel), None)
    return _installed_folder(runtime, python, _CUDART)


def _minor(files: list[HouseFile], name: str) -> str:
    found = next((f.version for f in files if f.name == name), "")
    return ".".join(found.split(".")[:2])


def _cuda_home(files: list[HouseFile], python: str) -> str:
    """The toolkit folder the locked nvidia-cuda-nvcc wheel installs (site-packages/nvidia/cuXY)."""
    return _installed_folder(next((f for f in files if f.name == "nvidia-cuda-nvcc"), None), python, _NVCC)


def _installed_folder(wheel: HouseFile | None, python: str, member: re.Pattern[str]) -> str:
    """Where the image's venv has the folder that ``member``'s group 1 names in ``wheel`` (its first match)."""
    import zipfile

    if wheel is None:
        return ""
    with zipfile.ZipFile(wheel.path) as archive:
        found = next((m.group(1) for m in map(member.match, archive.namelist()) if m), "")
    return f"{VENV}/lib/python{python}/site-packages/{found}" if found else ""


def _labels(
    profile: Profile, lock: Lock, verify_sha: str, base: BaseImage, paths: ProjectPaths
) -> tuple[tuple[str, str], ...]:
    created = oci.rfc3339(source_date_epoch(lock.header.exclude_newer))
    labels = {
        "org.opencontainers.image.title": image_repository(profile.name),
        "org.opencontainers.image.description": profile.description,
        "org.opencontainers.image.version": lock.sha256[:12],
        "org.opencontainers.image.created": created,
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.base.name": base.reference,
        "io.verlenv.profile": profile.name,
        "io.verlenv.lock-sha256": lock.sha256,
        "io.verlenv.verify-sha256": verify_sha,
        "io.verlenv.version": __version__,
        # what verlenv's own layer is made of, instead of a git commit (a docs-only commit changes no image)
        "io.verlenv.source-sha256": source_sha256(paths.root),
        "io.verlenv.base-diff-id": base.layer.diff_id,
        "io.verlenv.python": profile.python,
        "io.verlenv.cuda": profile.cuda,
    }
    for name in ("torch", "vllm", "verl", "sglang", "flash-attn", "transformers"):
        version = lock.version_of(name)
        if version:
            labels[f"io.verlenv.{name}"] = version
    return tuple(sorted(labels.items()))


def _self_check(client, image_id: str, store: LayerStore, epoch: int, quiet: bool) -> StoredLayer:  # type: ignore[no-untyped-def]
    """Run clean --check and doctor --static in a container of the image; keep doctor's ELF record."""
    _say("self-check: verlenv clean --check && verlenv doctor --static", quiet)
    container = client.containers.run(
        image_id, ["bash", "-c", SELF_CHECK], detach=True, network_mode="none", environment={"PYTHONHASHSEED": "0"}
    )
    try:
        status = container.wait(timeout=1800)
        if status.get("StatusCode") != 0:
            output = container.logs().decode(errors="replace").strip()
            _forget(client, image_id)
            raise CheckFailed("the image failed its self-check; nothing was tagged:\n" + output[-4000:])
        files = {name: _read_file(container, f"{DEFAULT_PATH.parent}/{name}") for name in _ELF_RECORD}
    finally:
        container.remove(force=True)
    folder = str(DEFAULT_PATH.parent).lstrip("/")
    items = [Item(Entry("opt", DIR, 0o755)), Item(Entry(folder, DIR, 0o755))]
    for name, data in sorted(files.items()):
        digest = hashlib.sha256(data).hexdigest()
        items.append(Item(Entry(f"{folder}/{name}", FILE, 0o644, len(data), digest), _opener(data)))
    contents = json.dumps({n: hashlib.sha256(d).hexdigest() for n, d in sorted(files.items())})
    key = f"self-check-{hashlib.sha256(contents.encode()).hexdigest()}-{epoch}"
    return _items_layer(store, key, items, epoch)


_ELF_RECORD = ("elfscan.json", "elfscan-objects.json.gz")


def _opener(data: bytes):  # type: ignore[no-untyped-def]
    return lambda: io.BytesIO(data)


def _read_file(container, path: str) -> bytes:  # type: ignore[no-untyped-def]
    stream, _ = container.get_archive(path)
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        member = tar.getmembers()[0]
        handle = tar.extractfile(member)
        if handle is None:
            raise CheckFailed(f"the self-check left no file at {path}")
        return handle.read()


def _forget(client, image_id: str, keep: str = "") -> None:  # type: ignore[no-untyped-def]
    if image_id and image_id != keep:
        oci.forget(client, image_id)


def _image_record(
    profile: Profile, lock: Lock, config: bytes, image_id: str, base: BaseImage, layers: list[NamedLayer], files: str
) -> expected.ImageRecord:
    body = json.loads(config)["config"]
    # What the image is made of: the base, each layer's key (its wheels and recipe), and the config
    # body. The self-check layer is an outcome, not an input.
    made_of = [base.layer.diff_id, *(layer.key for layer in layers if layer.key), body]
    inputs = hashlib.sha256(json.dumps(made_of, sort_keys=True).encode()).hexdigest()
    records = [expected.LayerRecord("base", base.layer.diff_id, base.layer.size, expected.groups(base.layer.entries()))]
    for layer in layers:
        stored = layer.stored
        records.append(expected.LayerRecord(layer.name, stored.diff_id, stored.size, expected.groups(stored.entries())))
    return expected.ImageRecord(profile.name, lock.sha256, inputs, image_id, files, body, records)


def _check_record(
    paths: ProjectPaths,
    record: expected.ImageRecord,
    layers: list[NamedLayer],
    store: LayerStore,
    options: BuildOptions,
) -> str:
    """matched (the committed record has these inputs and this image), written, or unchanged."""
    where = record_path(paths, record.profile)
    committed = expected.read(where)
    entries = {layer.stored.diff_id: layer.stored.entries() for layer in layers}
    if options.expect and options.expect != record.image_id:
        reference = committed if committed and committed.image_id == options.expect else None
        _refuse(record.image_id, options.expect, reference, record, entries, store, "--expect")
    if committed and committed.inputs_sha256 == record.inputs_sha256:
        if committed.image_id != record.image_id:
            _refuse(record.image_id, committed.image_id, committed, record, entries, store, where.name)
        return "matched"
    if not options.record:
        return "unchanged"
    expected.write(where, record)
    return "written"


def _refuse(image_id: str, wanted: str, reference, record, entries, store: LayerStore, source: str) -> None:  # type: ignore[no-untyped-def]
    lines = [f"the build gave {image_id}, but {source} expects {wanted}; nothing was tagged"]
    if reference is not None:
        for layer in reference.layers:
            stored = store.by_diff_id(layer.diff_id)
            if stored:
                entries[layer.diff_id] = stored.entries()
        lines += expected.explain(reference, record, entries)
    raise IntegrityError(
        "\n".join(lines), hint="the same inputs must give the same image: this is a reproducibility bug"
    )


def _tag(client, image_id: str, profile: Profile, lock: Lock, options: BuildOptions) -> tuple[str, ...]:  # type: ignore[no-untyped-def]
    repository = image_repository(profile.name)
    tags = [f"{repository}:{lock.sha256[:12]}", f"{repository}:latest", *options.extra_tags]
    for tag in tags:
        repo, _, name = tag.rpartition(":")
        client.api.tag(image_id, repo, name)
    return tuple(tags)


def _reporter(quiet: bool) -> Callable[[str], None]:
    return lambda message: _say(message, quiet)


def _say(message: str, quiet: bool) -> None:
    if not quiet:
        print(f"[build] {message}", file=sys.stderr, flush=True)


def summary(result: BuildResult) -> str:
    lines = [f"image {result.image_id}", *(f"tag   {t}" for t in result.tags), f"size  {result.size / 2**30:.2f} GiB"]
    lines.append(f"files {result.files_sha256} (per-file manifest)")
    lines.append(f"record {result.record}")
    lines.append(
        "time  "
        + ", ".join(f"{k} {v:.1f}s" for k, v in result.timings.items())
        + f" (total {sum(result.timings.values()):.1f}s)"
    )
    return "\n".join(lines)
