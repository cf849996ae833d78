"""The ELF ABI check over an installed environment (a site-packages directory).

The same engine as `verlenv verify`, fed from files on disk instead of wheels; `verlenv doctor`
runs it inside containers. Core module: standard library, packaging and pyelftools only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from verlenv.inside.elfcache import Key, Remembered, base_key, stat_key
from verlenv.inside.installed import Installed, top_levels, with_lent
from verlenv.profiles.bases import BaseFacts
from verlenv.verify.abi import ObjectVerdict, SharedObject, TorchFacts, check_objects, torch_facts
from verlenv.verify.distmeta import exact_pin
from verlenv.verify.objscan import ObjectError, find_shared_objects, read_file


@dataclass(frozen=True)
class EnvReport:
    torch: TorchFacts | None
    verdicts: tuple[ObjectVerdict, ...]
    errors: tuple[ObjectError, ...]
    read: int = 0  # shared objects read this time
    remembered: int = 0  # ... and taken from the recorded scan because they had not changed
    keys: dict[str, Key] = field(default_factory=dict, compare=False, repr=False)
    items: dict[str, SharedObject | ObjectError] = field(default_factory=dict, compare=False, repr=False)

    @property
    def ok(self) -> bool:
        return not self.errors and all(v.ok for v in self.verdicts)


def torch_pins(dists: dict[str, Installed]) -> dict[str, str]:
    return {name: pin for name, dist in dists.items() if (pin := exact_pin(dist.requires))}


def check_site(
    site: Path, base: BaseFacts, lent: Mapping[str, Path] | None = None, remembered: Remembered | None = None
) -> EnvReport:
    """The ELF check over ``site``, plus what a venv reuses from other sites (``lent``: name -> site).

    With ``remembered`` (the record of an earlier scan), files whose size and mtime are unchanged are
    not read again, and when nothing changed at all the recorded verdicts are returned as they are.
    """
    lent = lent or {}
    dists = with_lent(site, lent)
    owner_of = {top: dist.label for top, dist in top_levels(dists.values()).items()}
    files = [
        (owner_of.get(rel.split("/", 1)[0], rel.split("/", 1)[0]), rel, full)
        for root, tops in _roots(site, dists, lent)
        for rel, full in find_shared_objects(root, tops)
    ]
    keys = {full: stat_key(full) for _, _, full in files}
    if remembered and remembered.keys == keys and remembered.base == base_key(base):
        return EnvReport(remembered.torch, remembered.verdicts, remembered.errors, 0, len(keys), keys)
    known = remembered.facts() if remembered else {}
    recorded_keys = remembered.keys if remembered else {}
    items: dict[str, SharedObject | ObjectError] = {}
    read = 0
    for owner, rel, full in files:
        prior = known.get(full)
        if prior is not None and recorded_keys.get(full) == keys[full]:
            items[full] = _relabel(prior, owner)
        else:
            item = read_file(owner, rel, full)
            if item is not None:  # None: a linker script, nothing the loader maps
                items[full] = item
                read += 1
    objects = [i for i in items.values() if isinstance(i, SharedObject)]
    errors = tuple(i for i in items.values() if isinstance(i, ObjectError))
    torch = dists.get("torch")
    if torch is None:
        return EnvReport(None, (), errors, read, len(items) - read, keys, items)
    facts = torch_facts(torch.version, objects)
    verdicts = check_objects(objects, facts, base, torch_pins(dists))
    return EnvReport(facts, tuple(verdicts), errors, read, len(items) - read, keys, items)


def _relabel(item: SharedObject | ObjectError, owner: str) -> SharedObject | ObjectError:
    """A recorded object under its owner's current label (the distribution may have a new version)."""
    if isinstance(item, ObjectError):
        return ObjectError(owner, item.path, item.error)
    return SharedObject(owner, item.path, item.info)


def _roots(
    site: Path, dists: dict[str, Installed], lent: Mapping[str, Path]
) -> list[tuple[Path, frozenset[str] | None]]:
    """The venv's own site whole, and of each lending site only the top-level entries of what it lends."""
    roots: list[tuple[Path, frozenset[str] | None]] = [(site, None)]
    for where in sorted(set(lent.values())):
        names = [n for n, w in lent.items() if w == where and n in dists]
        roots.append((where, frozenset(top_levels(dists[n] for n in names))))
    return roots
