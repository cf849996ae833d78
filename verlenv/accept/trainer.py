"""Acceptance through verl's own trainer: `python -m verl.trainer.main_ppo` on the tiny model.

Everything is made on the spot in a work directory: the tiny Qwen2 model (head size 64, so vLLM's
attention kernels take it) with a chat template, a parquet data set of word prompts, and the reward
function of the suite's task as verl's custom reward function. The overrides follow verl's own
single-GPU and function-reward e2e scripts (tests/special_e2e/ppo_trainer/), scaled down; the run
logs through verl's file logger, whose per-step metrics (critic/score/mean, perf/max_memory_*,
perf/cpu_memory_used_gb, timing_s/*) feed the same verdicts as the suite's own loop, with NVML
sampled beside each logged step. `dry_run` composes and validates the config with verl's own Hydra
config and validate_config, without Ray or a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from verlenv.accept.task import TARGET, make_prompts
from verlenv.accept.tiny import ENGINE_SPEC, WORDS, make_model
from verlenv.errors import ConfigError

GIB_TO_MIB = 1024.0
# ChatML, as Qwen2 models have it: verl's agent loop for a qwen2 model tokenizes by its markers.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
MEMORY_METRICS = {
    "perf/max_memory_allocated_gb": "cuda_max_allocated_mib",
    "perf/max_memory_reserved_gb": "cuda_max_reserved_mib",
    "perf/cpu_memory_used_gb": "host_used_mib",
}
REWARD_METRIC = "critic/score/mean"
ESTIMATORS = ("grpo", "gae")
ROLLOUTS = {"vllm": "vLLM", "sglang": "SGLang"}  # verl's rollout.name, and how reports name it
LOSSES = ("actor/pg_loss", "critic/vf_loss", "actor/grad_norm", "critic/grad_norm")
# What a report keeps of each step: reward, losses, time, memory (verl logs ~150 metrics a step).
SUMMARY = (
    REWARD_METRIC,
    *LOSSES,
    "timing_s/gen",
    "timing_s/update_actor",
    "timing_s/update_weights",
    "timing_s/step",
    *MEMORY_METRICS,
)


@dataclass(frozen=True)
class TrainerConfig:
    """What the acceptance sets; everything else is verl's default config (rollout mode, attention,
    remove-padding, free_cache_engine, load_format)."""

    steps: int = 30
    batch: int = 64  # responses per step
    lr: float = 2e-3
    gpus: int = 1
    gpu_memory_utilization: float = 0.3  # a size, not a mode: runs may share a GPU
    seed: int = 0
    timeout_s: float = 1500.0
    estimator: str = "grpo"  # grpo: groups of `group` responses; gae: PPO with verl's critic
    rollout: str = "vllm"  # verl's rollout.name: the engine the image installs (rollout_for)
    group: int = 8  # GRPO responses per prompt: more samples per prompt, a steadier group baseline
    attn: str = ""  # "" = verl's default (flash_attention_2); e.g. "sdpa" where flash-attn is absent
    eager: bool = False  # rollout.enforce_eager=True: an explicit, non-default mode
    extra: tuple[str, ...] = ()  # more Hydra overrides, applied last

    def __post_init__(self) -> None:
        if self.rollout not in ROLLOUTS:
            raise ConfigError(
                f"rollout {self.rollout!r}: verl's trainer rolls out with one of {', '.join(ROLLOUTS)}",
                hint="--backend auto takes the engine this environment installs",
            )
        if self.estimator == "gae" and self.attn and self.attn != "flash_attention_2":
            # seen on the H200 (benchmarks/results/h200_image_tree_2026-12-03): the run fails minutes in
            raise ConfigError(
                f"--estimator gae with --attn {self.attn}: verl 0.9.1 loads the critic with flash_attention_2 "
                "hard-coded (verl/utils/model.py load_valuehead_model ignores the critic's attn_implementation), "
                "so PPO with a critic needs flash-attn installed",
                hint="run it in an image with flash-attn (the default profile builds it), or use --estimator grpo",
            )

    @property
    def compiled(self) -> bool:
        return not self.eager


@dataclass
class TrainerRun:
    exit_code: int
    seconds: float
    steps: list[dict[str, Any]]
    memory: dict[str, list[float]]
    overrides: list[str]
    log_tail: list[str] = field(default_factory=list)


def reward_source() -> str:
    """verl's custom reward function for the suite's task: how many TARGET words the response holds.

    Substrings, not whitespace-split words: a byte-level BPE response of an untrained model rarely
    has spaces where words end, and a word-split reward stayed 0.0 for every response (seen on the
    H200), which leaves GRPO no signal at all.
    """
    words = sorted(TARGET)
    return (
        f"TARGET = {words!r}\n\n\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return min(1.0, sum(solution_str.count(w) for w in TARGET) / 3)\n"
    )


def make_qwen_style_tokenizer(where: Path):  # type: ignore[no-untyped-def]
    """A byte-level BPE tokenizer over the task's words, with ChatML markers, saved beside the model.

    transformers 5 loads the tokenizer of any model whose config says qwen2 as Qwen2Tokenizer, which
    rebuilds it from vocabulary and merges with Qwen's own byte-level pre-tokenizer: the suite's
    word-level tokenizer then encodes every prompt to nothing (seen on the H200: vLLM's "decoder
    prompt cannot be empty"). A byte-level BPE survives that rebuild, and verl's agent loop finds
    what it expects of a Qwen tokenizer: "\n" one token, <|im_start|> and <|im_end|> present.
    """
    import random

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(0)
    corpus = [" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(2000)] + ["user", "assistant"]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    backend.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.padding_side = "left"
    tokenizer.save_pretrained(where)
    return tokenizer


def prepare(workdir: Path, config: TrainerConfig) -> dict[str, Path]:
    """Model, tokenizer (with a chat template), train/val parquet and reward file in ``workdir``."""
    import pandas as pd

    model = workdir / "model"
    model.mkdir(parents=True, exist_ok=True)
    tokenizer = make_qwen_style_tokenizer(model)
    make_model(model, len(tokenizer), tokenizer, replace(ENGINE_SPEC, seed=config.seed))
    rows = []
    for step in range(config.steps + 2):
        for prompt in make_prompts(step, config.batch, config.seed):
            rows.append(
                {
                    "data_source": "verlenv/target-words",
                    "prompt": [{"role": "user", "content": prompt.text}],
                    "ability": "words",
                    "reward_model": {"style": "rule", "ground_truth": ""},
                    "extra_info": {"id": prompt.id},
                }
            )
    train, val = workdir / "train.parquet", workdir / "val.parquet"
    pd.DataFrame(rows).to_parquet(train)
    pd.DataFrame(rows[: config.batch]).to_parquet(val)
    reward = workdir / "reward.py"
    reward.write_text(reward_source())
    return {"model": model, "train": train, "val": val, "reward": reward, "log": workdir / "metrics.jsonl"}


def overrides(files: dict[str, Path], config: TrainerConfig) -> list[str]:
    """Hydra overrides for verl 0.9's main_ppo (FSDP actor, vLLM or SGLang rollout, one node): data, sizes and the
    task; the modes stay verl's defaults unless the config asks otherwise."""
    n = config.group if config.estimator == "grpo" else 1
    prompts = max(config.gpus, config.batch // n)
    mini = max(config.gpus, prompts // 2)
    micro = max(1, mini * n // (2 * config.gpus))
    return [
        f"algorithm.adv_estimator={config.estimator}",
        f"data.train_files={files['train']}",
        f"data.val_files={files['val']}",
        f"data.train_batch_size={prompts}",
        "data.max_prompt_length=32",
        "data.max_response_length=12",
        "data.dataloader_num_workers=0",
        f"data.seed={config.seed}",
        f"actor_rollout_ref.model.path={files['model']}",
        *_attention(config),
        f"actor_rollout_ref.actor.optim.lr={config.lr}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={mini}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.actor.strategy=fsdp",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.rollout.name={config.rollout}",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        f"actor_rollout_ref.rollout.gpu_memory_utilization={config.gpu_memory_utilization}",
        *(["actor_rollout_ref.rollout.enforce_eager=True"] if config.eager else []),
        f"actor_rollout_ref.rollout.n={n}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={micro}",
        f"critic.model.path={files['model']}",
        f"critic.optim.lr={config.lr * 3}",
        f"critic.ppo_micro_batch_size_per_gpu={micro}",
        f"reward.custom_reward_function.path={files['reward']}",
        "reward.custom_reward_function.name=compute_score",
        "reward.num_workers=1",
        "algorithm.use_kl_in_reward=False",
        "trainer.critic_warmup=0",
        "trainer.logger=[console,file]",
        "trainer.project_name=verlenv-accept",
        f"trainer.experiment_name=tiny-{config.estimator}",
        "trainer.nnodes=1",
        f"trainer.n_gpus_per_node={config.gpus}",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.resume_mode=disable",
        "trainer.total_epochs=1",
        f"trainer.total_training_steps={config.steps}",
        f"trainer.default_local_dir={files['model'].parent / 'checkpoints'}",
        *config.extra,
    ]


def engine_overrides(pairs: tuple[tuple[str, Any], ...], rollout: str = "vllm") -> tuple[str, ...]:
    """--engine-arg KEY=VALUE for verl's rollout: verl passes rollout.engine_kwargs.<name> on to the
    engine's arguments over its own. Several runs sharing one GPU need a fixed KV size there: vLLM's
    profile-based sizing counts other processes' memory changes as its own (its own note in
    determine_available_memory) and then fails to start (kv_cache_memory_bytes); SGLang sizes its pool
    from the free memory it saw before loading, so a cap (max_total_tokens) keeps runs from taking it all."""
    prefix = f"+actor_rollout_ref.rollout.engine_kwargs.{rollout}"
    return tuple(f"{prefix}.{key}={json.dumps(value)}" for key, value in pairs)


def rollout_for(backend: str, installed: bool = True) -> str:
    """verl's rollout.name for --backend: the one named, or with auto the first engine installed here.
    ``installed=False`` (a dry run composes the config only) lets auto fall back to vllm, verl's usual."""
    import importlib.util

    if backend not in (*ROLLOUTS, "auto"):
        raise ConfigError(f"--trainer verl --backend {backend}: verl's trainer rolls out with vllm or sglang")
    here = [name for name in ROLLOUTS if importlib.util.find_spec(name) is not None]
    name = backend if backend != "auto" else (here or ["vllm"])[0]
    if installed and name not in here:
        raise ConfigError(
            f"--trainer verl: the {name} rollout is not installed here ({', '.join(here) or 'no engine'} is)",
            hint="run it in an image of a vLLM or SGLang profile (verlenv profiles), or pass --dry-run",
        )
    return name


def _attention(config: TrainerConfig) -> list[str]:
    """verl's default attention (flash_attention_2, remove-padding on) unless asked for another. verl 0.9.1
    loads the critic's value-head model with flash_attention_2 itself, so a critic needs flash-attn."""
    if not config.attn:
        return []
    return [
        f"+actor_rollout_ref.model.override_config.attn_implementation={config.attn}",
        f"+critic.model.override_config.attn_implementation={config.attn}",
        "actor_rollout_ref.model.use_remove_padding=False",
        "critic.model.use_remove_padding=False",
    ]


def environment(files: dict[str, Path]) -> dict[str, str]:
    return {
        **os.environ,
        "VERL_FILE_LOGGER_PATH": str(files["log"]),
        "PYTHONUNBUFFERED": "1",
        "VLLM_USE_V1": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "NCCL_NVLS_ENABLE": "0",  # never NVLink multicast (shared hosts)
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "disabled",
        "RAY_DEDUP_LOGS": "0",
    }


def dry_run(files: dict[str, Path], config: TrainerConfig) -> dict[str, Any]:
    """Compose the config with verl's own Hydra files and run verl's validate_config on it."""
    import verl
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        composed = compose(config_name="ppo_trainer", overrides=overrides(files, config))
    validate_config(composed, use_reference_policy=need_reference_policy(composed), use_critic=need_critic(composed))
    return {
        "verl": verl.__version__,
        "rollout": composed.actor_rollout_ref.rollout.name,
        "critic": need_critic(composed),
        "reference": need_reference_policy(composed),
        "steps": composed.trainer.total_training_steps,
        "engine_kwargs": dict(composed.actor_rollout_ref.rollout.engine_kwargs[config.rollout]),
    }


class _StepWatcher(threading.Thread):
    """Samples NVML every time verl's file logger writes a step, so GPU memory lines up with steps: the
    memory of this run's process tree (Ray workers descend from main_ppo), so runs can share a GPU."""

    def __init__(self, log: Path, interval_s: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.log, self.interval_s = log, interval_s
        self.samples: list[float] = []
        self.stop = threading.Event()
        self.root = os.getpid()
        self._handle = _nvml()
        self.series_name = _series_name(self._handle)

    def run(self) -> None:
        seen = 0
        while not self.stop.wait(self.interval_s):
            lines = _read_lines(self.log)
            while seen < len(lines):
                seen += 1
                self.samples.append(_nvml_used_mib(self._handle, self.root))


def run(workdir: Path, config: TrainerConfig, on_line=None) -> TrainerRun:  # type: ignore[no-untyped-def]
    files = prepare(workdir, config)
    args = overrides(files, config)
    watcher = _StepWatcher(files["log"])
    started = time.perf_counter()
    tail: list[str] = []
    with subprocess.Popen(
        [sys.executable, "-m", "verl.trainer.main_ppo", *args],
        cwd=workdir,
        env=environment(files),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as proc:
        watcher.root = proc.pid
        watcher.start()
        assert proc.stdout is not None
        deadline = started + config.timeout_s
        for line in proc.stdout:
            tail = [*tail[-199:], line.rstrip()]
            if on_line:
                on_line(line.rstrip())
            if time.perf_counter() > deadline:
                proc.kill()
                tail.append(f"[verlenv] killed after {config.timeout_s:.0f}s")
                break
        code = proc.wait()
    watcher.stop.set()
    watcher.join()
    steps = [json.loads(line) for line in _read_lines(files["log"])]
    memory = memory_series(steps, watcher.samples, watcher.series_name)
    return TrainerRun(code, time.perf_counter() - started, steps, memory, args, tail)


def memory_series(
    steps: list[dict[str, Any]], nvml: list[float], nvml_name: str = "nvml_process_mib"
) -> dict[str, list[float]]:
    """verl's per-step memory metrics in MiB, plus NVML samples taken as each step was logged."""
    series: dict[str, list[float]] = {}
    for metric, name in MEMORY_METRICS.items():
        values = [float(s["data"][metric]) * GIB_TO_MIB for s in steps if metric in s.get("data", {})]
        if values:
            series[name] = values
    if nvml and all(v >= 0 for v in nvml):
        series[nvml_name] = nvml
    return series


def step_summary(step: dict[str, Any]) -> dict[str, Any]:
    """The metrics a report keeps, under verl's names, plus the suite loop's names for the same things."""
    data = step.get("data", {})
    nan = float("nan")
    return {
        "step": step.get("step"),
        "reward": float(data.get(REWARD_METRIC, nan)),
        "gen_s": float(data.get("timing_s/gen", nan)),
        "train_s": float(data.get("timing_s/update_actor", nan)) + float(data.get("timing_s/update_critic", 0.0)),
        "sync_s": float(data.get("timing_s/update_weights", nan)),
        **{k: data[k] for k in SUMMARY if k in data},
    }


def rewards(steps: list[dict[str, Any]]) -> list[float]:
    return [float(s["data"][REWARD_METRIC]) for s in steps if REWARD_METRIC in s.get("data", {})]


def _read_lines(path: Path) -> list[str]:
    try:
        return [line for line in path.read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


def _nvml() -> object:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception:  # noqa: BLE001 - no NVML (CPU host): the series is simply absent
        return None


def _series_name(handle: object) -> str:
    if handle is None:
        return "nvml_used_mib"
    from verlenv.accept.memory import nvml_series_name

    return nvml_series_name(handle)


def _nvml_used_mib(handle: object, root: int) -> float:
    if handle is None:
        return -1.0
    from verlenv.accept.memory import nvml_used_mib

    return nvml_used_mib(handle, root)
