"""The acceptance suite inside the cpu-smoke image: it trains, passes, and its report names the image."""

from __future__ import annotations

import json

from tests.integration.conftest import run_in
from verlenv.accept.image import accept_image, load_report
from verlenv.paths import ProjectPaths
from verlenv.wheels.cache import Cache

AGREE = r"""
import torch
from verlenv.accept import algos
verl = algos.from_verl()
assert verl is not None, "verl does not import in the image"
g = torch.Generator().manual_seed(0)
rewards, values = torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g)
mask = (torch.arange(5) < torch.tensor([5, 3, 4, 5, 2, 1]).unsqueeze(1)).float()
old, new = torch.randn(6, 5, generator=g) * 0.1, torch.randn(6, 5, generator=g) * 0.1
adv_l, ret_l = algos.LOCAL.gae(rewards, values, mask, 0.99, 0.95)
adv_v, ret_v = verl.gae(rewards, values, mask, 0.99, 0.95)
pg_l, pg_v = algos.LOCAL.policy_loss(old, new, adv_l, mask, 0.2), verl.policy_loss(old, new, adv_l, mask, 0.2)
vf_l, vf_v = algos.LOCAL.value_loss(new, ret_l, values, mask, 0.5), verl.value_loss(new, ret_l, values, mask, 0.5)
diffs = [float((adv_l - adv_v).abs().max()), float((ret_l - ret_v).abs().max()),
         abs(float(pg_l - pg_v)), abs(float(vf_l - vf_v))]
print("AGREE", verl.source, max(diffs))
assert max(diffs) < 1e-5, diffs
"""


def test_local_ppo_math_agrees_with_verls_core_algos(engine, cpu_smoke) -> None:  # type: ignore[no-untyped-def]
    code, out = run_in(engine, cpu_smoke.image_id, f"python - <<'EOF'\n{AGREE}\nEOF")
    assert code == 0, out
    # stdout and stderr arrive interleaved, so find our line by its marker rather than its place
    ours = [line.split() for line in out.splitlines() if line.startswith("AGREE ")]
    assert [words[1:3] for words in ours] == [["verl", "0.9.1"]], out
    assert "FutureWarning" not in out, out  # the deprecated-but-stable call is silenced


def test_suite_passes_in_the_image_and_the_report_names_it(  # type: ignore[no-untyped-def]
    engine, cpu_smoke, project_copy: ProjectPaths, cache: Cache
) -> None:
    report, path = accept_image(project_copy, "cpu-smoke", cache, image=cpu_smoke.image_id, gpus="none")
    assert report["passed"], report["verdicts"]
    assert report["image_id"] == cpu_smoke.image_id and report["profile"] == "cpu-smoke"
    assert report["algorithms"] == "verl 0.9.1"  # verl imports in the image, so its own math is used
    assert {v["name"] for v in report["verdicts"]} >= {
        "reward-rises",
        "memory-rss_mib",
        "distributed-all-reduce",
        "global-normalization",
        "data-flow-integrity",
    }
    assert path == cache.acceptance_report(cpu_smoke.image_id) and load_report(cache, cpu_smoke.image_id) == report
    assert json.loads(path.read_text())["gpus_requested"] is False


def test_leak_injection_fails_in_the_image(engine, cpu_smoke, project_copy: ProjectPaths, tmp_path) -> None:  # type: ignore[no-untyped-def]
    private = Cache(tmp_path / "cache")
    report, _ = accept_image(
        project_copy,
        "cpu-smoke",
        private,
        image=cpu_smoke.image_id,
        gpus="none",
        args=("--inject-leak-mib", "2", "--no-distributed", "--steps", "20"),
    )
    assert not report["passed"]
    assert [v["name"] for v in report["verdicts"] if not v["passed"]] == ["memory-rss_mib"]


def test_verls_own_trainer_takes_the_acceptance_config(engine, cpu_smoke) -> None:  # type: ignore[no-untyped-def]
    # verl's own Hydra files compose our overrides and verl's validate_config accepts them (no GPU
    # needed): a verl release that renames a key breaks this before a GPU hour is spent on it.
    code, out = run_in(
        engine,
        cpu_smoke.image_id,
        "verlenv accept --trainer verl --dry-run --json --workdir /tmp/v --engine-arg kv_cache_memory_bytes=1073741824",
        stderr=False,
    )
    assert code == 0, out
    facts = json.loads(out[out.index("{") :])
    assert facts["verl"] == "0.9.1" and facts["rollout"] == "vllm" and facts["critic"] is False
    assert facts["engine_kwargs"] == {"kv_cache_memory_bytes": 1073741824}  # reaches verl's vLLM server args
    code, out = run_in(
        engine,
        cpu_smoke.image_id,
        "verlenv accept --trainer verl --dry-run --json --workdir /tmp/s --backend sglang "
        "--engine-arg max_total_tokens=32768",
        stderr=False,
    )
    assert code == 0, out
    facts = json.loads(out[out.index("{") :])
    assert facts["rollout"] == "sglang" and facts["engine_kwargs"] == {"max_total_tokens": 32768}
