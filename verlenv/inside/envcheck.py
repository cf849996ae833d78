"""The ELF ABI check over an installed environment (a site-packages directory).

The same engine as `verlenv verify`, fed from files on disk instead of wheels; `verlenv doctor`
runs it inside containers. Core module: standard library, packaging and pyelftools only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from verlenv.inside.installed import Installed, top_levels, with_lent
from verlenv.profiles.bases import BaseFacts
from verlenv.verify.abi import ObjectVerdict, SharedObject, TorchFacts, check_objects, torch_facts
from verlenv.verify.distmeta import exact_pin
from verlenv.verify.objscan import ObjectError, scan_site_packages


@dataclass(frozen=True)
class EnvReport:
    torch: TorchFacts | None
    verdicts: tuple[ObjectVerdict, ...]
    errors: tuple[ObjectError, ...]

    @property
    def ok(self) -> bool:
        return not self.errors and all(v.ok for v in self.verdicts)


def torch_pins(dists: dict[str, Installed]) -> dict[str, str]:
    return {name: pin for name, dist in dists.items() if (pin := exact_pin(dist.requires))}


def check_site(site: Path, base: BaseFacts, lent: Mapping[str, Path] | None = None) -> EnvReport:
    """The ELF check over ``site``, plus what a venv reuses from other sites (``lent``: name -> site)."""
    lent = lent or {}
    dists = with_lent(site, lent)
    owner_of = {top: dist.label for top, dist in top_levels(dists.values()).items()}
    objects: list[SharedObject] = []
    errors: list[ObjectError] = []
    for root, tops in _roots(site, dists, lent):
        for item in scan_site_packages(root, tops):
            owner = owner_of.get(item.path.split("/", 1)[0], item.owner)
            if isinstance(item, ObjectError):
                errors.append(ObjectError(owner, item.path, item.error))
            else:
                objects.append(SharedObject(owner, item.path, item.info))
    torch = dists.get("torch")
    if torch is None:
        return EnvReport(None, (), tuple(errors))
    facts = torch_facts(torch.version, objects)
    verdicts = check_objects(objects, facts, base, torch_pins(dists))
    return EnvReport(facts, tuple(verdicts), tuple(errors))


def _roots(
    site: Path, dists: dict[str, Installed], lent: Mapping[str, Path]
) -> list[tuple[Path, frozenset[str] | None]]:
    """The venv's own site whole, and of each lending site only the top-level entries of what it lends."""
    roots: list[tuple[Path, frozenset[str] | None]] = [(site, None)]
    for where in sorted(set(lent.values())):
        names = [n for n, w in lent.items() if w == where and n in dists]
        roots.append((where, frozenset(top_levels(dists[n] for n in names))))
    return roots
