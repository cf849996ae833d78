"""doctor's flash-attn check on CPU: skipped without flash-attn, a real extension built against another torch,
and the GPU part's report, produced by the same run_varlen with stand-in kernels."""

from __future__ import annotations

import json
import shutil
import sysconfig
from pathlib import Path

import pytest

from tests.helpers.fakewheels import compile_so
from verlenv.inside.doctor.checks_flashattn import SDPA, check_flash_attn, judge, run
from verlenv.inside.doctor.flashattn_run import reference, run_varlen
from verlenv.inside.doctor.model import Facts, Status
from verlenv.inside.doctor.registry import CHECKS

torch = pytest.importorskip("torch")

# An extension built with the old C++ string ABI: it needs c10::Error(SourceLocation, std::string) spelled
# with `Ss`, which no cxx11 torch exports, so dlopen fails as in field-notes §3 #3.
OLD_ABI_EXTENSION = r"""
#include <string>
namespace c10 {
struct SourceLocation { const char* file; int line; };
struct Error { Error(SourceLocation loc, std::string msg); };
}
extern "C" void* PyInit_flash_attn_2_cuda() { c10::Error e({"f", 1}, std::string("x")); return nullptr; }
"""
RELEASE_WHEEL = (
    "https://github.com/Dao-AILab/flash-attention/releases/download/v2.8.3/"
    "flash_attn-2.8.3+cu12torch2.7cxx11abiFALSE-cp311-cp311-linux_x86_64.whl"
)


def _facts(site: Path) -> Facts:
    return Facts(site=site, manifest_file=site / "no-manifest.json")


def _flash_attn(site: Path, extension: Path | None) -> Path:
    """flash-attn 2.8.3 laid out as pip leaves its release wheel; ``extension`` is its flash_attn_2_cuda."""
    (site / "flash_attn").mkdir(parents=True)
    (site / "flash_attn" / "__init__.py").write_text(
        "__version__ = '2.8.3'\nfrom flash_attn.flash_attn_interface import flash_attn_varlen_func\n"
    )
    (site / "flash_attn" / "flash_attn_interface.py").write_text(
        "import flash_attn_2_cuda as flash_attn_gpu\ndef flash_attn_varlen_func(*args, **kwargs): ...\n"
    )
    if extension is None:  # an extension that imports: enough for the no-GPU path
        (site / "flash_attn_2_cuda.py").write_text("")
    else:
        shutil.copy(extension, site / f"flash_attn_2_cuda{sysconfig.get_config_var('EXT_SUFFIX')}")
    info = site / "flash_attn-2.8.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: flash_attn\nVersion: 2.8.3\n")
    (info / "direct_url.json").write_text(json.dumps({"url": RELEASE_WHEEL, "archive_info": {}}))
    return site


def test_registered_as_a_runtime_check() -> None:
    [check] = [c for c in CHECKS if c.id == "flash-attn"]
    assert not check.static  # the build's `doctor --static` never runs it


def test_without_flash_attn_it_skips_saying_verls_default_needs_it(tmp_path: Path) -> None:
    (tmp_path / "site").mkdir()
    result = check_flash_attn(_facts(tmp_path / "site"))
    assert result.status is Status.SKIP
    assert result.summary == "flash-attn is not installed: verl's default attention (flash_attention_2) needs it"
    assert SDPA in result.fix


def test_an_extension_built_against_another_torch_names_both_torches_and_the_abi(tmp_path: Path) -> None:
    (tmp_path / "build").mkdir()
    extension = compile_so(tmp_path / "build" / "flash_attn_2_cuda.so", OLD_ABI_EXTENSION, 0)
    result = check_flash_attn(_facts(_flash_attn(tmp_path / "site", extension)))
    assert result.status is Status.FAIL, result
    assert (
        result.summary
        == "flash-attn 2.8.3 does not load: undefined symbol c10::Error::Error(c10::SourceLocation, std::string)"
    )
    assert "undefined symbol: _ZN3c105ErrorC1ENS_14SourceLocationESs" in result.details[0]
    assert result.fix == (
        f"flash-attn 2.8.3 was built for torch 2.7; torch {torch.__version__} is installed and does not export this "
        "symbol (it was built with the pre-cxx11 C++ string ABI, torch with cxx11: take the cxx11abiTRUE wheel): "
        f"rebuild it against torch {torch.__version__} (pip install --no-build-isolation --no-deps flash-attn==2.8.3), "
        "or relock so flash-attn is built for the profile's torch"
    )


def test_imports_without_a_gpu_is_ok_and_says_the_kernels_did_not_run(tmp_path: Path) -> None:
    result = check_flash_attn(_facts(_flash_attn(tmp_path / "site", None)))
    assert (result.status, result.summary) == (
        Status.OK,
        "flash-attn 2.8.3 imports (flash_attn_2_cuda.py); no GPU here, so its kernels did not run",
    )


def test_a_child_that_does_not_finish_is_a_failure(tmp_path: Path) -> None:
    result = judge(run([str(tmp_path)], timeout=0.05), "2.8.3")
    assert result.status is Status.FAIL and result.summary == "the flash-attn check did not finish within 0s"


# The GPU part: run_varlen itself, on CPU, with stand-ins for flash_attn_varlen_func (same signature).
def _right(q, k, v, cu_q, cu_k, max_q, max_k, causal):  # type: ignore[no-untyped-def]
    assert causal and cu_q.tolist() == [0, 5, 16] and (max_q, max_k) == (11, 11)
    return reference(q, k, v)


def _mixes_sequences(q, k, v, cu_q, cu_k, max_q, max_k, causal):  # type: ignore[no-untyped-def]
    # one causal sequence of 16: what a kernel that ignores cu_seqlens computes
    scores = q.transpose(0, 1) @ k.transpose(0, 1).transpose(-1, -2) / 8.0
    future = torch.ones(16, 16, dtype=torch.bool).triu(1)
    return (scores.masked_fill(future, float("-inf")).softmax(-1) @ v.transpose(0, 1)).transpose(0, 1)


def _gpu_report(varlen) -> dict:  # type: ignore[no-untyped-def, type-arg]
    gpu = run_varlen(varlen, device="cpu")
    gpu["device"] = "NVIDIA H200"  # as torch.cuda.get_device_name() names it there
    return {
        "torch": {"version": "2.11.0", "cxx11_abi": True},
        "flash_attn": "2.8.3",
        "extension": "/s/x.so",
        "gpu": gpu,
    }


def test_reference_is_pytorchs_causal_attention_per_sequence() -> None:
    q, k, v = (torch.randn(16, 2, 64) for _ in range(3))
    ours = reference(q, k, v)
    for start, end in ((0, 5), (5, 16)):
        qs, ks, vs = (t[start:end].transpose(0, 1) for t in (q, k, v))
        sdpa = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=True).transpose(0, 1)
        assert torch.allclose(ours[start:end], sdpa, atol=1e-5)


def test_gpu_run_within_tolerance_is_ok() -> None:
    result = judge(_gpu_report(_right), "2.8.3")
    assert result.status is Status.OK, result
    assert result.summary.startswith(
        "flash-attn 2.8.3 ran a causal bf16 varlen forward and backward on NVIDIA H200 (sequences of 5 and 11): "
        "max |out - PyTorch attention| "
    )
    assert result.summary.endswith(", gradients finite")


def test_gpu_output_that_differs_from_pytorch_fails() -> None:
    result = judge(_gpu_report(_mixes_sequences), "2.8.3")
    assert result.status is Status.FAIL and result.summary.endswith("its output differs from PyTorch's")
    assert result.details[0].startswith("max |out - PyTorch attention| ") and SDPA in result.fix


def test_gpu_gradients_that_are_not_finite_fail() -> None:
    report = _gpu_report(_right)
    report["gpu"]["grads_finite"] = False
    assert judge(report, "2.8.3").summary.endswith("gradients are not finite")


def test_gpu_kernel_error_names_the_architecture_fix() -> None:
    report = {
        "torch": {"version": "2.11.0"},
        "extension": "/s/flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so",
        "gpu": {
            "error": "RuntimeError: CUDA error: no kernel image is available for execution on the device",
            "device": "NVIDIA H200",
        },
    }
    result = judge(report, "2.8.3")
    assert result.status is Status.FAIL
    assert result.summary == (
        "flash-attn 2.8.3 imports (flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so), "
        "but its kernels fail on NVIDIA H200"
    )
    assert "FLASH_ATTN_CUDA_ARCHS" in result.fix
