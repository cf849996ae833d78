"""flash-attn for real, in the child process of doctor's `flash-attn` check (`python -m` this module).

A mismatched extension can kill the process on import and a kernel can hang, so the parent runs this
with a timeout and reads one marked JSON line. `run_varlen` is the GPU part, the same code on any machine:
a causal varlen forward and backward in bf16 over two sequences of different lengths, compared with
PyTorch attention computed per sequence in float32. Standard library only at import time.
"""

from __future__ import annotations

import itertools
import json
import math
import sys
from collections.abc import Callable
from typing import Any

MARKER = "@@FLASH_ATTN@@"
LENGTHS = (5, 11)  # unequal, so a kernel that ignores cu_seqlens mixes the two and shows it
HEADS, HEAD_DIM = 2, 64
# bf16 keeps 8 significant bits: the limit is twice PyTorch's own bf16 error on the same inputs
# (flash-attn's tests use the same rule), and never below this floor.
FLOOR = 2e-2


def describe(exc: BaseException) -> str:
    """The whole chain: flash_attn's own ImportError wraps the loader's 'undefined symbol' message."""
    parts, seen = [], set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts.append(f"{type(current).__name__}: {current}")
        current = current.__cause__ or current.__context__
    return " <- ".join(parts)


def exercise() -> dict[str, Any]:
    """Import torch, flash_attn and flash_attn_2_cuda; with a GPU, run the kernels."""
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - whatever breaks torch is the finding
        return {"torch_error": describe(exc)}
    out: dict[str, Any] = {
        "torch": {"version": torch.__version__, "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI)},
    }
    try:
        import flash_attn
        import flash_attn_2_cuda
    except Exception as exc:  # noqa: BLE001 - the import error is the finding
        out["import_error"] = describe(exc)
        return out
    out["flash_attn"] = str(getattr(flash_attn, "__version__", "?"))
    out["extension"] = str(getattr(flash_attn_2_cuda, "__file__", ""))
    if torch.cuda.is_available():
        try:
            out["gpu"] = run_varlen()
        except Exception as exc:  # noqa: BLE001 - a kernel that fails is the finding
            out["gpu"] = {"error": describe(exc), "device": torch.cuda.get_device_name()}
    return out


def run_varlen(varlen: Callable[..., Any] | None = None, device: str = "cuda") -> dict[str, Any]:
    """flash_attn_varlen_func (or ``varlen``, same signature) forward and backward, judged against PyTorch."""
    import torch

    if varlen is None:
        from flash_attn import flash_attn_varlen_func as varlen
    torch.manual_seed(0)
    total, longest = sum(LENGTHS), max(LENGTHS)
    cu_seqlens = torch.tensor([0, *itertools.accumulate(LENGTHS)], dtype=torch.int32, device=device)
    q, k, v = (
        torch.randn(total, HEADS, HEAD_DIM, device=device, dtype=torch.bfloat16, requires_grad=True) for _ in range(3)
    )
    out = varlen(q, k, v, cu_seqlens, cu_seqlens, longest, longest, causal=True)
    out.backward(torch.randn_like(out))
    exact = reference(q.detach().float(), k.detach().float(), v.detach().float())
    rounded = reference(q.detach(), k.detach(), v.detach()).float()
    error, torch_error = _max_abs(out.detach().float() - exact), _max_abs(rounded - exact)
    return {
        "device": torch.cuda.get_device_name() if device == "cuda" else device,
        "lengths": list(LENGTHS),
        "max_error": error,
        "limit": max(FLOOR, 2 * torch_error),
        "grads_finite": all(bool(torch.isfinite(t.grad).all()) for t in (q, k, v)),
    }


def reference(q: Any, k: Any, v: Any) -> Any:
    """Causal attention per sequence, in the inputs' dtype: (total, heads, dim) in, the same out."""
    import torch

    outputs, start = [], 0
    for length in LENGTHS:
        qs, ks, vs = (t[start : start + length].transpose(0, 1) for t in (q, k, v))  # (heads, length, dim)
        scores = qs @ ks.transpose(-1, -2) / math.sqrt(HEAD_DIM)
        future = torch.ones(length, length, dtype=torch.bool, device=q.device).triu(1)
        outputs.append((scores.masked_fill(future, float("-inf")).softmax(-1) @ vs).transpose(0, 1))
        start += length
    return torch.cat(outputs)


def _max_abs(diff: Any) -> float:
    return float(diff.abs().max().item())


def main(sites: list[str]) -> None:
    sys.path[:0] = sites  # the site-packages doctor inspects, ahead of this interpreter's own
    print(MARKER + json.dumps(exercise()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
