"""Layers loaded into the engine while the layers above them are still being installed.

`docker load` of a cold default image took 91 s of a 254 s build, after every layer was written. The
engine registers a layer once its parents are there, so each time the installed layers form a longer
prefix of the image's stack, that prefix is loaded as an image of its own (one load at a time, in
stack order) while the other layers install. The final load then sends only what is missing. The
prefix images carry a label and are removed at the end, success or not; their layers stay as long
as the built image uses them.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from verlenv.image import oci

LABEL = "io.verlenv.preload"


class Preloader:
    """Loads growing prefixes of one stack in the background; leaving its ``with`` block waits for
    them and removes their images."""

    def __init__(self, client, name: str, epoch: int) -> None:  # type: ignore[no-untyped-def]
        self._client = client
        self._spec = oci.ImageSpec(env=(), labels=((LABEL, name),), epoch=epoch)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="verlenv-preload")
        self._sent = 0
        self._loads: list[Future[str]] = []

    def offer(self, prefix: Sequence[oci.Layer]) -> None:
        """Load ``prefix`` (the base first) unless a prefix at least as long was offered before."""
        if len(prefix) > self._sent:
            self._sent = len(prefix)
            self._loads.append(self._pool.submit(self._load, list(prefix)))

    def _load(self, prefix: list[oci.Layer]) -> str:
        return oci.load(self._client, oci.config_bytes(self._spec, prefix), prefix)

    def wait(self) -> None:
        """Wait for the loads in flight; raise the first one's error (the final load would meet the
        same engine problem, so it is reported where it happened)."""
        self._pool.shutdown(wait=True)
        for load in self._loads:
            if load.exception() is not None:
                raise load.exception()  # type: ignore[misc]

    def __enter__(self) -> Preloader:
        return self

    def __exit__(self, *exc: object) -> None:
        """Remove the prefix images, once the image that needs their layers is loaded (or the build
        failed): removing one earlier would drop layers nothing else holds yet."""
        self._pool.shutdown(wait=True)
        for load in self._loads:
            if load.exception() is None:
                oci.forget(self._client, load.result())
