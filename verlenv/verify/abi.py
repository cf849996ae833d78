"""The ELF ABI check: do the extensions that link libtorch load against *this* torch?

Core module: ``verlenv verify`` feeds it objects read from wheels, ``verlenv doctor`` objects read
from an installed site-packages. Rules, for every shared object that NEEDs libtorch*/libc10*:

* each undefined, non-weak dynamic symbol in torch's namespaces (c10, at, torch, caffe2, THP*)
  must be exported by a library in its NEEDED closure (torch/lib/*.so in practice);
* the C++ string ABI of those symbols (``std::__cxx11::basic_string`` vs ``std::string``) must
  match the one torch was built with;
* every DT_NEEDED library must be in the set, in the base image, or provided by the host driver;
* GLIBC_/GLIBCXX_ versions it needs must not exceed what the base image provides.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from verlenv.profiles.bases import BaseFacts
from verlenv.verify.demangle import demangle
from verlenv.verify.elf import ElfInfo, Undefined

TORCH_LIB = re.compile(r"^lib(torch|c10)[\w.-]*\.so")
_TORCH_SYMBOL = re.compile(r"^(_Z(T[VIST])?N?[KVr]*(3c10|2at|5torch|6caffe2)|THP|_ZN\d+THP)")
_PYTHON_SYMBOL = re.compile(r"^_?Py|^_Py")
HOST_LIBRARIES = frozenset({"libcuda.so.1", "libcuda.so", "libnvidia-ml.so.1", "libnvidia-ml.so"})
MAX_EXAMPLES = 5


@dataclass(frozen=True)
class SharedObject:
    owner: str  # "vllm 0.9.1" or a directory name
    path: str  # path inside the wheel or site-packages
    info: ElfInfo

    @property
    def name(self) -> str:
        return self.info.soname or self.path.rsplit("/", 1)[-1]

    @property
    def is_torch_lib(self) -> bool:
        return "torch/lib/" in self.path and bool(TORCH_LIB.match(self.path.rsplit("/", 1)[-1]))

    @property
    def torch_needs(self) -> tuple[str, ...]:
        return tuple(n for n in self.info.needed if TORCH_LIB.match(n))


@dataclass(frozen=True)
class Finding:
    kind: str  # missing-symbols | abi-mismatch | missing-needed | glibc-too-new | glibcxx-too-new
    message: str
    fix: str
    examples: tuple[str, ...] = ()
    count: int = 0


@dataclass(frozen=True)
class ObjectVerdict:
    owner: str
    path: str
    torch_needs: tuple[str, ...]
    findings: tuple[Finding, ...]
    abi: str  # "cxx11" | "pre-cxx11" | "unknown"
    checked_symbols: int
    # Why the findings do not fail the check: another build of the same object loads instead,
    # or the profile waives this object with a stated reason.
    excused: str = ""

    @property
    def ok(self) -> bool:
        return not self.findings or bool(self.excused)


@dataclass(frozen=True)
class TorchFacts:
    version: str  # the torch whose libraries were read: the one every verdict speaks of
    abi: str
    exported: frozenset[str]
    locked: str = ""  # the lock's torch, when another release is checked in its place (verify --try)


def string_abi(symbols: Iterable[str]) -> str:
    """'cxx11', 'pre-cxx11' or 'unknown' from the std::string spelling in torch-namespace symbols."""
    new = old = False
    for symbol in symbols:
        if not _TORCH_SYMBOL.match(symbol):
            continue
        if "St7__cxx11" in symbol:
            new = True
        elif "Ss" in symbol or "basic_string" in symbol:
            text = demangle(symbol)
            old = old or ("std::string" in text or "std::basic_string<" in text)
    if new and not old:
        return "cxx11"
    if old and not new:
        return "pre-cxx11"
    return "mixed" if new and old else "unknown"


def torch_facts(version: str, objects: Iterable[SharedObject], locked: str = "") -> TorchFacts:
    """``version`` is the torch whose libraries are among ``objects``; ``locked`` the lock's, when it differs."""
    libs = [o for o in objects if o.is_torch_lib]
    exported = frozenset().union(*(o.info.exported for o in libs)) if libs else frozenset()
    c10 = [o for o in libs if o.name.startswith("libc10.so")]
    return TorchFacts(
        version=version,
        abi=string_abi(next(iter(c10)).info.exported) if c10 else "unknown",
        exported=exported,
        locked=locked if locked != version else "",
    )


def check_objects(
    objects: list[SharedObject],
    torch: TorchFacts,
    base: BaseFacts,
    torch_pins: Mapping[str, str],
    other_names: Iterable[str] = (),
) -> list[ObjectVerdict]:
    """A verdict for every object that NEEDs a torch library (torch's own libraries excluded).

    ``other_names`` are file names of libraries in the set that were not read (CUDA runtime wheels).
    """
    by_name = {o.name: o for o in objects}
    by_name.update({o.path.rsplit("/", 1)[-1]: o for o in objects})
    available = frozenset(by_name) | frozenset(other_names) | base.libraries | HOST_LIBRARIES
    verdicts = []
    for obj in objects:
        if obj.torch_needs and not obj.is_torch_lib:
            verdicts.append(_check_one(obj, by_name, available, torch, base, torch_pins.get(obj.owner.split()[0], "")))
    return sorted(_excuse_alternatives(verdicts), key=lambda v: (v.owner, v.path))


def apply_waivers(verdicts: list[ObjectVerdict], waivers: Iterable[tuple[str, str]]) -> list[ObjectVerdict]:
    """Excuse failing objects whose path matches a profile waiver (glob, reason)."""
    result = []
    for verdict in verdicts:
        reason = next((why for pattern, why in waivers if fnmatch.fnmatchcase(verdict.path, pattern)), "")
        if verdict.findings and not verdict.excused and reason:
            verdict = replace(verdict, excused=f"waived by the profile: {reason}")
        result.append(verdict)
    return result


def variant_key(verdict: ObjectVerdict) -> tuple[str, str]:
    """Objects of one package that differ only in numbers are alternative builds of one thing.

    torch-c-dlpack-ext ships one addon per torch release (``..._torch24-cpu.so`` ... ``_torch29``),
    torchcodec one core per FFmpeg major (``libtorchcodec_core4.so`` ... ``core9``); each loads
    the build that fits the installed torch / FFmpeg. One loadable member is enough.
    """
    return verdict.owner, re.sub(r"\d+", "#", verdict.path)


def _excuse_alternatives(verdicts: list[ObjectVerdict]) -> list[ObjectVerdict]:
    groups: dict[tuple[str, str], list[ObjectVerdict]] = {}
    for verdict in verdicts:
        groups.setdefault(variant_key(verdict), []).append(verdict)
    result = []
    for members in groups.values():
        passing = [m for m in members if not m.findings]
        for member in members:
            if member.findings and len(members) > 1 and passing:
                member = replace(member, excused=f"alternative build; {passing[-1].path} is the one that loads here")
            result.append(member)
    return result


def _closure_exports(obj: SharedObject, by_name: Mapping[str, SharedObject]) -> frozenset[str]:
    seen: set[str] = set()
    todo = list(obj.info.needed)
    exports: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name not in by_name:
            continue
        seen.add(name)
        exports |= by_name[name].info.exported
        todo.extend(by_name[name].info.needed)
    return frozenset(exports)


def _check_one(
    obj: SharedObject,
    by_name: Mapping[str, SharedObject],
    available: frozenset[str],
    torch: TorchFacts,
    base: BaseFacts,
    pin: str,
) -> ObjectVerdict:
    exports = _closure_exports(obj, by_name)
    torch_symbols = [u for u in obj.info.undefined if not u.weak and not u.version and _TORCH_SYMBOL.match(u.name)]
    abi = string_abi(u.name for u in torch_symbols)
    findings = [
        *_missing_symbols(obj, torch_symbols, exports, torch, pin),
        *_abi_mismatch(obj, abi, torch),
        *_missing_needed(obj, available),
        *_too_new(obj, base),
    ]
    return ObjectVerdict(obj.owner, obj.path, obj.torch_needs, tuple(findings), abi, len(torch_symbols))


def _missing_symbols(
    obj: SharedObject, symbols: list[Undefined], exports: frozenset[str], torch: TorchFacts, pin: str
) -> list[Finding]:
    missing = sorted({u.name for u in symbols if u.name not in exports})
    if not missing:
        return []
    examples = tuple(demangle(s) for s in missing[:MAX_EXAMPLES])
    return [
        Finding(
            "missing-symbols",
            f"{len(missing)} symbol(s) not exported by torch {torch.version}'s libraries "
            f"({', '.join(obj.torch_needs)})",
            _missing_fix(obj.owner, torch, pin),
            examples,
            len(missing),
        )
    ]


def _missing_fix(dist: str, torch: TorchFacts, pin: str) -> str:
    name = dist.split()[0]
    if not pin or pin == torch.version:
        return f"rebuild {name} against torch {torch.version}, or pick the release built for it"
    # The pin says which torch the binary was built for; the torch checked is the one that lacks the symbols.
    keep = f"keep the lock's torch {pin}" if torch.locked == pin else f"lock torch=={pin}"
    return (
        f"{dist} was built for torch {pin} (its Requires-Dist pins torch=={pin}) and torch {torch.version} lacks "
        f"these symbols: {keep}, or take a {name} built for torch {torch.version}"
    )


def _abi_mismatch(obj: SharedObject, abi: str, torch: TorchFacts) -> list[Finding]:
    if "unknown" in (abi, torch.abi) or abi == torch.abi:
        return []
    flag = "TRUE" if torch.abi == "cxx11" else "FALSE"
    return [
        Finding(
            "abi-mismatch",
            f"built with the {abi} C++ string ABI; torch {torch.version} uses {torch.abi}",
            f"use the {obj.owner.split()[0]} wheel built with cxx11abi{flag} "
            f"(torch._C._GLIBCXX_USE_CXX11_ABI is {flag == 'TRUE'})",
        )
    ]


def _missing_needed(obj: SharedObject, available: frozenset[str]) -> list[Finding]:
    missing = [n for n in obj.info.needed if n not in available]
    if not missing:
        return []
    return [
        Finding(
            "missing-needed",
            f"DT_NEEDED not provided by the wheel set, the base image or the driver: {', '.join(missing)}",
            "add the package that ships it to the profile (e.g. an nvidia-* wheel) or to the base image's packages",
            tuple(missing),
            len(missing),
        )
    ]


def version_key(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text))


def _too_new(obj: SharedObject, base: BaseFacts) -> list[Finding]:
    findings = []
    for prefix, kind, have in (("GLIBC_", "glibc-too-new", base.glibc), ("GLIBCXX_", "glibcxx-too-new", base.glibcxx)):
        wanted = [
            v
            for _, versions in obj.info.version_needs
            for v in versions
            if v.startswith(prefix) and v[len(prefix) :][:1].isdigit()
        ]
        if not wanted or not have:
            continue
        newest = max(wanted, key=lambda v: version_key(v[len(prefix) :]))
        if version_key(newest[len(prefix) :]) > version_key(have):
            findings.append(
                Finding(
                    kind,
                    f"needs {newest}; the base image provides {prefix.rstrip('_')} {have}",
                    "use a base image with a newer glibc/libstdc++, or a wheel built for an older one",
                    (newest,),
                    1,
                )
            )
    return findings
