"""The ELF ABI check over an installed environment (a site-packages directory).

The same engine as `verlenv verify`, fed from files on disk instead of wheels; `verlenv doctor`
runs it inside containers. Core module: standard library, packaging and pyelftools only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from verlenv.inside.installed import Installed, by_name, top_levels
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


def check_site(site: Path, base: BaseFacts) -> EnvReport:
    dists = by_name(site)
    owner_of = {top: dist.label for top, dist in top_levels(dists.values()).items()}
    objects: list[SharedObject] = []
    errors: list[ObjectError] = []
    for item in scan_site_packages(site):
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
