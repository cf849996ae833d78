"""The acceptance suite in-process on the CPU: the whole loop, leak injection, id mismatch, LoRA,
the gloo smoke, the memory statistics, and the vLLM backend against vLLM's interface."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from verlenv.accept import algos, loop
from verlenv.accept.dist import run_smoke
from verlenv.accept.loop import AcceptConfig
from verlenv.accept.memory import gate, theil_sen
from verlenv.accept.rollout import HFRollout, SGLangRollout, VLLMRollout
from verlenv.accept.suite import run_suite
from verlenv.accept.task import DataFlowError, Prompt, make_prompts, reward
from verlenv.accept.tiny import make_tiny, make_tokenizer

FAST = {"steps": 20, "batch": 32, "prefer_verl": False}


def _verdicts(report: dict) -> dict[str, bool]:  # type: ignore[type-arg]
    return {v["name"]: v["passed"] for v in report["verdicts"]}


def test_the_loop_learns_and_passes_every_gate() -> None:
    report = run_suite(AcceptConfig(**FAST), distributed=False)
    assert report["passed"], report["verdicts"]
    rewards = [s["reward"] for s in report["steps"]]
    assert rewards[-1] > rewards[0] + 0.3
    assert report["backend"] == "hf" and report["algorithms"] == "verlenv"
    assert set(report["memory"]) == {"rss_mib"} and len(report["memory"]["rss_mib"]) == 20
    assert all(k in report["steps"][0] for k in ("gen_s", "train_s", "sync_s", "grad_norm", "kl"))


def test_injected_leak_fails_the_memory_gate() -> None:
    report = run_suite(AcceptConfig(**FAST, inject_leak_mib=2), distributed=False)
    verdicts = _verdicts(report)
    assert not report["passed"] and verdicts["memory-rss_mib"] is False
    assert verdicts["reward-rises"] is True  # only the gate failed


def test_reward_inputs_out_of_order_fail_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    real = loop.make_backend

    class Shuffled:
        def __init__(self, inner) -> None:  # type: ignore[no-untyped-def]
            self.inner, self.name = inner, "hf-shuffled"

        def generate(self, prompts, max_new_tokens, seed):  # type: ignore[no-untyped-def]
            out = self.inner.generate(prompts, max_new_tokens, seed)
            return out[1:] + out[:1]

        def __getattr__(self, item):  # type: ignore[no-untyped-def]
            return getattr(self.inner, item)

    monkeypatch.setattr(loop, "make_backend", lambda *a: Shuffled(real(*a)))
    report = run_suite(AcceptConfig(**FAST), distributed=False)
    assert not report["passed"]
    [integrity] = [v for v in report["verdicts"] if v["name"] == "data-flow-integrity"]
    assert not integrity["passed"] and "first mismatch at position 0" in integrity["value"]


def test_reward_refuses_missing_rollouts() -> None:
    prompts = make_prompts(0, 3, 0)
    with pytest.raises(DataFlowError, match="2 rollouts for 3 prompts"):
        reward(prompts, [_rollout(p) for p in prompts[:2]])


def _rollout(prompt: Prompt):  # type: ignore[no-untyped-def]
    from verlenv.accept.task import Rollout

    return Rollout(prompt.id, (1,), (2,), "w0")


def test_lora_adapters_learn_and_the_base_stays_frozen() -> None:
    report = run_suite(AcceptConfig(**FAST, lora=True), distributed=False)
    verdicts = _verdicts(report)
    assert verdicts["lora-adapters-get-gradients"] and verdicts["lora-base-frozen"], report["lora"]
    assert report["lora"]["base_changed"] == [] and report["lora"]["adapter_grad_norm_min"] > 0


def test_gloo_smoke_all_reduce_and_global_normalization() -> None:
    smoke = run_smoke("cpu")
    assert smoke["backend"] == "gloo" and smoke["all_reduce"] == 3.0
    assert smoke["normalization_ok"] and smoke["per_rank_differs"]


def test_local_algorithms_match_hand_computed_values() -> None:
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.5, 0.0]])
    values = torch.tensor([[0.1, 0.2, 0.3], [0.0, 0.1, 0.2]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv, ret = algos.gae(rewards, values, mask, 1.0, 1.0)
    # gamma = lam = 1: return = sum of future rewards over valid tokens
    assert torch.allclose(ret * mask, torch.tensor([[1.0, 1.0, 1.0], [0.5, 0.5, 0.0]]) * mask, atol=1e-6)
    raw = (ret - values) * mask
    mean = raw.sum() / mask.sum()
    var = (((raw - mean) ** 2) * mask).sum() / (mask.sum() - 1)
    assert torch.allclose(adv * mask, ((raw - mean) / torch.sqrt(var + 1e-8)) * mask, atol=1e-5)
    old, new = torch.zeros(1, 2), torch.log(torch.tensor([[1.5, 0.5]]))
    loss = algos.policy_loss(old, new, torch.tensor([[1.0, -1.0]]), torch.ones(1, 2), 0.2)
    assert math.isclose(float(loss), (-1.2 + 0.8) / 2, rel_tol=1e-6)  # both ratios clipped to [0.8, 1.2]


def test_theil_sen_ignores_one_jump_but_not_a_trend() -> None:
    flat_with_jump = [100.0] * 12 + [120.0] + [100.0] * 11
    assert theil_sen(flat_with_jump) == 0.0
    assert math.isclose(theil_sen([100.0 + 1.0 * i for i in range(24)]), 1.0)
    [verdict] = gate({"x": [0.0] * 5 + [0.6 * i for i in range(20)]}, warmup=5)
    assert not verdict.passed and math.isclose(verdict.slope_mib_per_step, 0.6)


@dataclass
class FakeOutput:
    token_ids: list[int]
    text: str


@dataclass
class FakeResult:
    prompt_token_ids: list[int]
    outputs: list[FakeOutput]


@dataclass
class FakeLLM:
    """vLLM's LLM surface the backend uses: generate, apply_model, sleep, wake_up."""

    calls: list[str] = field(default_factory=list)
    loaded: dict = field(default_factory=dict)  # type: ignore[type-arg]
    prompts: list = field(default_factory=list)  # type: ignore[type-arg]

    def generate(self, prompts, params, use_tqdm=False):  # type: ignore[no-untyped-def]
        self.prompts.extend(prompts)
        assert len({p["seed"] for p in params}) == len(prompts)  # a seed of its own for every request
        self.calls.append(f"generate:{len(prompts)}:{params[0]['max_tokens']}")
        return [FakeResult([1, 2], [FakeOutput([5, 6], "w0 w1")]) for _ in prompts]

    def apply_model(self, fn):  # type: ignore[no-untyped-def]
        class Model:
            def load_weights(inner, weights):  # type: ignore[no-untyped-def]
                self.loaded.update(dict(weights))

        fn(Model())

    def reset_prefix_cache(self) -> None:
        self.calls.append("reset-prefix-cache")

    def sleep(self, level: int) -> None:
        self.calls.append(f"sleep:{level}")

    def wake_up(self) -> None:
        self.calls.append("wake")


def test_vllm_backend_against_vllms_interface(tmp_path: Path) -> None:
    llm = FakeLLM()
    tokenizer = make_tokenizer(tmp_path)
    backend = VLLMRollout(Path("/unused"), tokenizer=tokenizer, llm=llm, sampling_params=lambda **kw: kw)
    prompts = make_prompts(0, 3, 0)
    backend.wake()
    out = backend.generate(prompts, 4, seed=1)
    backend.sync_weights({"lm_head.weight": torch.ones(2)})
    backend.sleep()
    assert [r.id for r in out] == [p.id for p in prompts] and out[0].response_ids == (5, 6)
    # prompts go in as our tokenizer's ids; responses come back decoded by it
    assert llm.prompts[0] == {"prompt_token_ids": tokenizer(prompts[0].text)["input_ids"]}
    assert out[0].response_text == tokenizer.decode([5, 6])
    assert llm.calls == ["wake", "generate:3:4", "reset-prefix-cache", "sleep:1"]
    assert torch.equal(llm.loaded["lm_head.weight"], torch.ones(2))


def test_hf_backend_sync_changes_what_it_generates(tmp_path: Path) -> None:
    tokenizer, model = make_tiny(tmp_path / "m")
    backend = HFRollout(tmp_path / "m", tokenizer, "cpu")
    prompts = make_prompts(0, 4, 0)
    before = backend.generate(prompts, 4, seed=3)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["lm_head.weight"] = (
        state["lm_head.weight"] * 0
        + torch.nn.functional.one_hot(
            torch.full((state["lm_head.weight"].shape[0],), tokenizer.convert_tokens_to_ids("w0")),
            state["lm_head.weight"].shape[1],
        ).float()
    )
    backend.sync_weights(state)
    after = backend.generate(prompts, 4, seed=3)
    assert [r.response_ids for r in before] != [r.response_ids for r in after]


def test_data_parallel_loop_keeps_ranks_in_sync_and_gates_each_rank() -> None:
    from verlenv.accept.suite import run_dp_suite

    report = run_dp_suite(AcceptConfig(steps=14, batch=32, prefer_verl=False), 2)
    verdicts = _verdicts(report)
    assert report["passed"], report["verdicts"]
    assert verdicts["ranks-in-sync"] and verdicts["rank0-memory-rss_mib"] and verdicts["rank1-memory-rss_mib"]
    assert report["data_parallel"]["backend"] == "gloo" and report["data_parallel"]["world_size"] == 2


def test_data_parallel_leak_fails_on_every_rank() -> None:
    from verlenv.accept.suite import run_dp_suite

    verdicts = _verdicts(run_dp_suite(AcceptConfig(steps=14, batch=32, prefer_verl=False, inject_leak_mib=2), 2))
    assert verdicts["rank0-memory-rss_mib"] is False and verdicts["rank1-memory-rss_mib"] is False
    assert verdicts["ranks-in-sync"] is True


def test_the_verl_mode_tokenizer_survives_transformers_qwen2_rebuild(tmp_path: Path) -> None:
    # transformers 5 loads a qwen2 model's tokenizer as Qwen2Tokenizer (byte-level); the trainer
    # mode's tokenizer must still encode the chat-templated prompt and decode it back exactly.
    from transformers import AutoTokenizer

    from verlenv.accept.tiny import ENGINE_SPEC, make_model
    from verlenv.accept.trainer import make_qwen_style_tokenizer

    ours = make_qwen_style_tokenizer(tmp_path)
    make_model(tmp_path, len(ours), ours, ENGINE_SPEC)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    text = loaded.apply_chat_template(
        [{"role": "user", "content": "w1 w12 w3"}], add_generation_prompt=True, tokenize=False
    )
    ids = loaded.encode(text, add_special_tokens=False)
    assert len(ids) > 6 and loaded.decode(ids) == text
    assert len(loaded.encode("\n", add_special_tokens=False)) == 1  # what verl's Qwen token builder requires
    assert loaded.convert_tokens_to_ids("<|im_end|>") == loaded.eos_token_id


@dataclass
class FakeSGLangEngine:
    """sglang.Engine's surface the backend uses, as verl uses it between rollout and training."""

    calls: list[str] = field(default_factory=list)
    requests: list = field(default_factory=list)  # type: ignore[type-arg]
    loaded: dict = field(default_factory=dict)  # type: ignore[type-arg]

    def generate(self, input_ids, sampling_params):  # type: ignore[no-untyped-def]
        self.requests.append((input_ids, sampling_params))
        self.calls.append(f"generate:{len(input_ids)}:{sampling_params[0]['max_new_tokens']}")
        return [{"output_ids": [5, 6], "text": "ignored"} for _ in input_ids]

    def update_weights_from_tensor(self, named_tensors, flush_cache=True):  # type: ignore[no-untyped-def]
        assert flush_cache  # the old weights' KV cache must go
        self.loaded.update(dict(named_tensors))
        self.calls.append("update-weights")

    def release_memory_occupation(self) -> None:
        self.calls.append("release")

    def resume_memory_occupation(self, tags=None) -> None:  # type: ignore[no-untyped-def]
        self.calls.append(f"resume:{','.join(tags or ['all'])}")


def test_sglang_backend_against_sglangs_engine_interface(tmp_path: Path) -> None:
    engine = FakeSGLangEngine()
    tokenizer = make_tokenizer(tmp_path)
    backend = SGLangRollout(Path("/unused"), tokenizer, engine=engine)
    prompts = make_prompts(0, 3, 0)
    backend.wake()
    out = backend.generate(prompts, 4, seed=1)
    backend.sync_weights({"lm_head.weight": torch.ones(2)})
    backend.sleep()
    ids, params = engine.requests[0]
    assert ids[0] == tokenizer(prompts[0].text)["input_ids"]
    assert len({p["sampling_seed"] for p in params}) == 3 and params[0]["ignore_eos"] is True
    assert [r.id for r in out] == [p.id for p in prompts] and out[0].response_ids == (5, 6)
    assert out[0].response_text == tokenizer.decode([5, 6])
    backend.wake()
    # nothing to resume before the first release; then verl's order: released weights come back
    # undefined, so they are resumed, pushed again, and only then the KV cache comes back
    assert engine.calls == [
        "generate:3:4", "update-weights", "release",
        "resume:weights", "update-weights", "resume:kv_cache,cuda_graph",
    ]  # fmt: skip
    assert torch.equal(engine.loaded["lm_head.weight"], torch.ones(2))


def test_backend_choice_prefers_the_asked_engine_and_falls_back_to_hf_on_cpu() -> None:
    from verlenv.accept.loop import engine_of

    assert engine_of(AcceptConfig(backend="sglang", device="cuda")) == "sglang"
    assert engine_of(AcceptConfig(backend="auto", device="cpu")) == "hf"


def test_engine_args_reach_the_engine_constructor_over_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    from verlenv.commands.accept import engine_args

    seen: dict = {}
    monkeypatch.setitem(sys.modules, "sglang", types.SimpleNamespace(Engine=lambda **kw: seen.update(kw)))
    pairs = engine_args(["attention_backend=triton", "mem_fraction_static=0.3", "disable_cuda_graph=false"])
    config = AcceptConfig(backend="sglang", device="cuda", engine_args=pairs)
    from verlenv.accept.loop import make_backend

    make_backend(config, Path("/m"), tokenizer=None)
    assert seen["attention_backend"] == "triton" and seen["mem_fraction_static"] == 0.3
    assert seen["disable_cuda_graph"] is False and seen["skip_tokenizer_init"] is True
    assert seen["model_path"] == "/m"


def test_a_malformed_engine_arg_is_a_usage_error() -> None:
    from verlenv.commands.accept import engine_args
    from verlenv.errors import ConfigError

    with pytest.raises(ConfigError, match="--engine-arg 'gpu memory'"):
        engine_args(["gpu memory"])


def test_defaults_an_older_sglang_does_not_know_are_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses
    import sys
    import types

    @dataclasses.dataclass
    class ServerArgs:  # sglang 0.5.5 knows no disable_piecewise_cuda_graph
        model_path: str = ""
        dtype: str = "auto"
        skip_tokenizer_init: bool = False

    seen: dict = {}
    srt = types.ModuleType("sglang.srt")
    server_args = types.ModuleType("sglang.srt.server_args")
    server_args.ServerArgs = ServerArgs  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sglang", types.SimpleNamespace(Engine=lambda **kw: seen.update(kw)))
    monkeypatch.setitem(sys.modules, "sglang.srt", srt)
    monkeypatch.setitem(sys.modules, "sglang.srt.server_args", server_args)
    from verlenv.accept.loop import make_backend

    pairs = (("attention_backend", "triton"),)  # the user's own key goes through as given
    make_backend(AcceptConfig(backend="sglang", device="cuda", engine_args=pairs), Path("/m"), tokenizer=None)
    assert "disable_piecewise_cuda_graph" not in seen and seen["skip_tokenizer_init"] is True
    assert seen["attention_backend"] == "triton" and seen["model_path"] == "/m"


def test_the_rollout_engines_run_their_default_modes_unless_told() -> None:
    """vLLM's default is torch.compile + CUDA graphs; eager is an explicit choice, never ours."""
    from verlenv.accept.loop import AcceptConfig
    from verlenv.accept.rollout import compiled_mode, mode_name, vllm_args

    default = AcceptConfig()
    assert "enforce_eager" not in vllm_args(Path("m"), default.engine_kwargs("vllm"))
    assert compiled_mode("vllm", default.engine_kwargs("vllm")) and compiled_mode(
        "sglang", default.engine_kwargs("sglang")
    )
    eager = AcceptConfig(eager=True)
    assert vllm_args(Path("m"), eager.engine_kwargs("vllm"))["enforce_eager"] is True
    assert eager.engine_kwargs("sglang") == {"disable_cuda_graph": True}
    assert mode_name("vllm", eager.engine_kwargs("vllm")) == "vLLM eager"
    assert mode_name("vllm", {}) == "vLLM default: torch.compile + CUDA graphs"


def test_compiled_engines_get_a_longer_warm_up_not_a_looser_threshold() -> None:
    from verlenv.accept.memory import THRESHOLD_MIB_PER_STEP, warmup_steps
    from verlenv.accept.verdicts import memory_verdicts

    assert warmup_steps(30, compiled=False) == 6 and warmup_steps(30, compiled=True) == 10
    # graph pools filled over the first 13 steps, then flat: the eager warm-up would call it a leak
    series = {"cuda_reserved_mib": [100.0 + 40 * min(i, 13) for i in range(30)]}
    assert not all(v.passed for v in memory_verdicts(series, 30, compiled=False))
    assert all(v.passed for v in memory_verdicts(series, 30, compiled=True))
    leak = {"cuda_reserved_mib": [100.0 + 40 * min(i, 13) + 1.0 * i for i in range(30)]}
    [verdict] = memory_verdicts(leak, 30, compiled=True)
    assert not verdict.passed and verdict.threshold == THRESHOLD_MIB_PER_STEP


def test_the_process_tree_holds_a_child_and_its_grandchild() -> None:
    import subprocess
    import sys

    from verlenv.accept.memory import tree_pids

    sleeper = "import time; time.sleep(30)"
    script = (
        "import subprocess, sys, time; "
        f"p = subprocess.Popen([sys.executable, '-c', {sleeper!r}]); print(p.pid, flush=True); time.sleep(30)"
    )
    with subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        grandchild = int(child.stdout.readline())
        try:
            found = tree_pids(os.getpid())
            assert {child.pid, grandchild} <= found
            assert tree_pids(child.pid) >= {child.pid, grandchild} and os.getpid() not in tree_pids(child.pid)
        finally:
            subprocess.run(["kill", str(grandchild)], check=False)
            child.kill()


def test_verls_trainer_runs_with_verls_default_modes(tmp_path: Path) -> None:
    from verlenv.accept.trainer import TrainerConfig, overrides

    files = {k: tmp_path / k for k in ("train", "val", "model", "reward", "log")}
    default = overrides(files, TrainerConfig())
    joined = "\n".join(default)
    assert "enforce_eager" not in joined and "attn_implementation" not in joined and "use_remove_padding" not in joined
    assert "free_cache_engine" not in joined and "load_format" not in joined
    assert "algorithm.adv_estimator=grpo" in default and "actor_rollout_ref.rollout.n=8" in default
    gae = overrides(files, TrainerConfig(estimator="gae"))
    assert "algorithm.adv_estimator=gae" in gae and "actor_rollout_ref.rollout.n=1" in gae
    assert "data.train_batch_size=64" in gae
    explicit = overrides(files, TrainerConfig(eager=True, attn="sdpa"))
    assert "actor_rollout_ref.rollout.enforce_eager=True" in explicit
    assert "+actor_rollout_ref.model.override_config.attn_implementation=sdpa" in explicit


def test_engine_args_become_verls_vllm_engine_kwargs(tmp_path: Path) -> None:
    from verlenv.accept.trainer import TrainerConfig, engine_overrides, overrides
    from verlenv.commands.accept import engine_args

    pairs = engine_args(["kv_cache_memory_bytes=2147483648", 'attention_backend="FLASH_ATTN"'])
    extra = engine_overrides(pairs)
    assert extra == (
        "+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes=2147483648",
        '+actor_rollout_ref.rollout.engine_kwargs.vllm.attention_backend="FLASH_ATTN"',
    )
    files = {k: tmp_path / k for k in ("train", "val", "model", "reward", "log")}
    assert overrides(files, TrainerConfig(extra=extra))[-2:] == list(extra)  # last: over verlenv's own


def test_an_sglang_image_rolls_out_with_sglang_and_its_engine_kwargs(tmp_path: Path) -> None:
    from verlenv.accept.trainer import TrainerConfig, engine_overrides, overrides, rollout_for
    from verlenv.errors import ConfigError

    extra = engine_overrides((("max_total_tokens", 32768),), "sglang")
    assert extra == ("+actor_rollout_ref.rollout.engine_kwargs.sglang.max_total_tokens=32768",)
    files = {k: tmp_path / k for k in ("train", "val", "model", "reward", "log")}
    args = overrides(files, TrainerConfig(rollout="sglang", extra=extra))
    assert "actor_rollout_ref.rollout.name=sglang" in args and "actor_rollout_ref.rollout.name=vllm" not in args
    with pytest.raises(ConfigError, match="rolls out with one of vllm, sglang"):
        TrainerConfig(rollout="hf")
    # this venv installs neither engine: a run is refused up front, a dry run composes with vllm
    assert rollout_for("auto", installed=False) == "vllm" and rollout_for("sglang", installed=False) == "sglang"
    for backend in ("auto", "sglang"):
        with pytest.raises(ConfigError, match="not installed here"):
            rollout_for(backend)
    with pytest.raises(ConfigError, match="--backend hf"):
        rollout_for("hf", installed=False)


def test_a_critic_without_flash_attention_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """On the H200, GAE with --attn sdpa ran 4 minutes and died in verl's load_valuehead_model, which
    asks for flash_attention_2 whatever the critic's config says."""
    from verlenv.accept.trainer import TrainerConfig
    from verlenv.cli import main
    from verlenv.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        TrainerConfig(estimator="gae", attn="sdpa")
    assert "load_valuehead_model" in str(info.value) and "--estimator grpo" in info.value.hint
    assert TrainerConfig(estimator="gae", attn="flash_attention_2").attn == "flash_attention_2"
    args = ["accept", "--trainer", "verl", "--estimator", "gae", "--attn", "sdpa", "--workdir", str(tmp_path)]
    assert main(args) == 2
