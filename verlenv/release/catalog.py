"""images/catalog.json: profile -> repository, tags, digest, versions and acceptance, written atomically."""

from __future__ import annotations

import json
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from verlenv import atomic
from verlenv.errors import ConfigError, ServiceError

CATALOG_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Entry:
    profile: str
    repository: str  # HOST[:PORT]/REPO
    digest: str
    tags: list[str]
    lock_sha256: str
    image_id: str
    components: dict[str, str]
    acceptance: dict[str, Any]
    attachment: str  # the tag that carries the acceptance report
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def by_digest(self) -> str:
        return f"{self.repository}@{self.digest}"


def read(source: str | Path) -> dict[str, Entry]:
    """Entries by profile; an absent file is an empty catalog, a corrupt one a ConfigError."""
    text = _fetch(str(source))
    if text is None:
        return {}
    try:
        data = json.loads(text)
        if data.get("schema_version") != CATALOG_SCHEMA_VERSION:
            raise ValueError(f"schema_version {data.get('schema_version')!r}")
        return {name: Entry(**entry) for name, entry in data["images"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(
            f"{source}: not a valid verlenv catalog ({exc})",
            hint="restore it from version control; nothing was changed",
        ) from None


def _fetch(source: str) -> str | None:
    if source.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(source, timeout=30) as response:
                return response.read().decode()
        except OSError as exc:
            raise ServiceError(f"cannot read the catalog at {source}: {exc}") from None
    path = Path(source)
    return path.read_text() if path.exists() else None


def write(path: Path, entries: dict[str, Entry]) -> None:
    payload = {
        "schema_version": CATALOG_SCHEMA_VERSION,
        "images": {name: asdict(entry) for name, entry in sorted(entries.items())},
    }
    atomic.write_text(path, json.dumps(payload, indent=2, sort_keys=True) + "\n")


def find(entries: dict[str, Entry], name_or_tag: str) -> Entry:
    if name_or_tag in entries:
        return entries[name_or_tag]
    for entry in entries.values():
        if name_or_tag in entry.tags or name_or_tag in (t.rsplit(":", 1)[-1] for t in entry.tags):
            return entry
    from verlenv.output import did_you_mean

    raise ConfigError(
        f"'{name_or_tag}' is not in the catalog",
        hint=did_you_mean(name_or_tag, list(entries)) or f"published profiles: {', '.join(sorted(entries)) or 'none'}",
    )
