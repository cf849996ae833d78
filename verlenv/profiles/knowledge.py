"""Facts about verl and vLLM that no package metadata states (field-notes §1c, §3)."""

from __future__ import annotations

from packaging.specifiers import SpecifierSet
from packaging.version import Version

# verl's runtime gate on the vLLM version (verl/third_party/vllm/__init__.py), by verl release.
_VERL_VLLM_GATE: tuple[tuple[str, str], ...] = (
    (">=0.5.0", ">=0.7.0"),
    (">=0.4.0,<0.5.0", ">=0.7.0"),  # plus the legacy 0.5.4 / 0.6.3 pins, which no profile uses
)
KNOWN_BAD_VLLM = SpecifierSet(">=0.7.0,<0.8.0")  # host-memory leak with n>1 (verl README, vllm#15597)


def verl_vllm_gate(verl: str) -> SpecifierSet | None:
    version = Version(verl)
    for verl_range, vllm_range in _VERL_VLLM_GATE:
        if version in SpecifierSet(verl_range):
            return SpecifierSet(vllm_range)
    return None
