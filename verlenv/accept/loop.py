"""The PPO loop: rollout -> reward (ids checked) -> old/ref log-probs and values -> GAE -> clipped
policy and value updates with a KL penalty -> weight sync -> memory sample, every step."""

from __future__ import annotations

import copy
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from verlenv.accept import algos
from verlenv.accept.memory import LeakInjector, MemorySampler
from verlenv.accept.rollout import HFRollout, RolloutBackend, SGLangRollout, VLLMRollout, engine_usable
from verlenv.accept.task import Rollout, make_prompts, reward
from verlenv.accept.tiny import ENGINE_SPEC, TinySpec, load_tiny, make_tiny


@dataclass(frozen=True)
class AcceptConfig:
    steps: int = 30
    batch: int = 64
    response_len: int = 6
    lr: float = 3e-3
    ppo_epochs: int = 2
    gamma: float = 1.0
    lam: float = 0.95
    clip: float = 0.2
    value_clip: float = 0.5
    vf_coef: float = 0.5
    kl_coef: float = 0.01
    grad_clip: float = 1.0
    seed: int = 0
    device: str = "cpu"
    backend: str = "auto"  # auto | hf | vllm | sglang
    lora: bool = False
    inject_leak_mib: int = 0
    prefer_verl: bool = True
    world_size: int = 1  # data-parallel ranks (verlenv.accept.dp sets rank and process group)
    rank: int = 0
    engine_args: tuple[tuple[str, Any], ...] = ()  # passed to vLLM's LLM or sglang.Engine, over our defaults
    eager: bool = False  # the engine's eager mode (no compile, no CUDA graphs): explicit, never the default

    def engine_kwargs(self, engine: str) -> dict[str, Any]:
        eager = {"vllm": {"enforce_eager": True}, "sglang": {"disable_cuda_graph": True}}.get(engine, {})
        return {**(eager if self.eager else {}), **dict(self.engine_args)}


@dataclass
class StepRecord:
    step: int
    reward: float
    pg_loss: float
    vf_loss: float
    kl: float
    grad_norm: float
    gen_s: float
    train_s: float
    sync_s: float
    memory: dict[str, float]


@dataclass
class LoopResult:
    records: list[StepRecord]
    memory: dict[str, list[float]]
    backend: str
    algorithms: str
    lora: dict[str, Any] = field(default_factory=dict)
    params: list[Any] = field(default_factory=list, repr=False)  # final trainable tensors (DP sync check)


class ActorCritic:
    """A causal LM with a scalar value head on its last hidden state (LoRA adapters optional)."""

    def __init__(self, model, lora: bool, device: str) -> None:  # type: ignore[no-untyped-def]
        import torch

        if lora:
            from peft import LoraConfig, get_peft_model

            # Every linear layer, lm_head included: with the head frozen the tiny model learns the
            # task far too slowly for a few dozen steps.
            targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"]
            model = get_peft_model(model, LoraConfig(r=8, lora_alpha=32, target_modules=targets, lora_dropout=0.0))
        self.lm = model.to(device)
        hidden = model.config.hidden_size
        self.value_head = torch.nn.Linear(hidden, 1).to(device)
        torch.nn.init.zeros_(self.value_head.weight)
        torch.nn.init.zeros_(self.value_head.bias)

    def parameters(self):  # type: ignore[no-untyped-def]
        return [p for p in self.lm.parameters() if p.requires_grad] + list(self.value_head.parameters())

    def forward(self, input_ids, attention_mask, prompt_len: int):  # type: ignore[no-untyped-def]
        """(log-probs of the response tokens, values of the states before them), each (B, R)."""
        import torch

        out = self.lm(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        logits = out.logits[:, prompt_len - 1 : -1].float()
        targets = input_ids[:, prompt_len:]
        logp = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        values = self.value_head(out.hidden_states[-1][:, prompt_len - 1 : -1].float()).squeeze(-1)
        return logp, values


def plain_state(model) -> dict:  # type: ignore[no-untyped-def, type-arg]
    """The full (merged) weights a rollout engine loads: LoRA deltas folded in, peft prefixes gone."""
    if hasattr(model, "merge_and_unload"):
        import torch

        with torch.no_grad():
            merged = copy.deepcopy(model).merge_and_unload()
        return {k: v.detach() for k, v in merged.state_dict().items()}
    return {k: v.detach() for k, v in model.state_dict().items()}


def _tensors(rollouts: list[Rollout], pad_id: int, device: str):  # type: ignore[no-untyped-def]
    import torch

    width = max(len(r.prompt_ids) for r in rollouts)
    rows, masks = [], []
    for r in rollouts:
        pad = width - len(r.prompt_ids)
        rows.append([pad_id] * pad + list(r.prompt_ids) + list(r.response_ids))
        masks.append([0] * pad + [1] * (len(r.prompt_ids) + len(r.response_ids)))
    return torch.tensor(rows, device=device), torch.tensor(masks, device=device), width


def engine_of(config: AcceptConfig) -> str:
    """The rollout engine: the one asked for, else on a GPU vLLM or SGLang when it imports, else hf."""
    if config.backend != "auto":
        return config.backend
    on_gpu = config.device.startswith("cuda")
    return next((name for name in ("vllm", "sglang") if on_gpu and engine_usable(name)), "hf")


def make_backend(config: AcceptConfig, model_dir: Path, tokenizer) -> RolloutBackend:  # type: ignore[no-untyped-def]
    engine = engine_of(config)
    if engine == "vllm":
        return VLLMRollout(model_dir, tokenizer, engine_args=config.engine_kwargs("vllm"))
    if engine == "sglang":
        return SGLangRollout(model_dir, tokenizer, engine_args=config.engine_kwargs("sglang"))
    return HFRollout(model_dir, tokenizer, config.device)


def run_loop(config: AcceptConfig, workdir: Path | None = None, on_step=None) -> LoopResult:  # type: ignore[no-untyped-def]
    import torch

    torch.manual_seed(config.seed)
    with tempfile.TemporaryDirectory(prefix="verlenv-accept-") as tmp:
        model_dir = workdir or Path(tmp) / "tiny"
        if (model_dir / "config.json").exists():  # made by the parent of data-parallel ranks
            tokenizer, model = load_tiny(model_dir)
        else:
            spec = ENGINE_SPEC if engine_of(config) != "hf" else TinySpec()
            tokenizer, model = make_tiny(model_dir, replace(spec, seed=config.seed))
        backend = make_backend(config, model_dir, tokenizer)
        return _train(config, tokenizer, model, backend, on_step)


def _train(config: AcceptConfig, tokenizer, model, backend: RolloutBackend, on_step) -> LoopResult:  # type: ignore[no-untyped-def]
    import torch

    # Data parallel: verl whitens advantages over the whole step batch; with several ranks that
    # takes all-reduced statistics, which verl's single-process functions do not do.
    math = algos.pick(config.prefer_verl) if config.world_size == 1 else algos.distributed()
    reference = copy.deepcopy(model).to(config.device).eval().requires_grad_(False)
    policy = ActorCritic(model, config.lora, config.device)
    base_before = _base_fingerprint(policy) if config.lora else None
    # Adapters learn from a zero delta: they need a larger step than full fine-tuning to move as far.
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr * (3 if config.lora else 1))
    sampler, leak = MemorySampler(config.device), LeakInjector(config.inject_leak_mib, config.device)
    records: list[StepRecord] = []
    lora_grads: list[float] = []
    for step in range(config.steps):
        prompts = make_prompts(step, config.batch, config.seed)[config.rank :: config.world_size]
        started = time.perf_counter()
        backend.wake()
        rollouts = backend.generate(prompts, config.response_len, seed=config.seed * 1000 + step)
        gen_s = time.perf_counter() - started
        scores = reward(prompts, rollouts)
        started = time.perf_counter()
        stats = _ppo_update(config, math, policy, reference, optimizer, rollouts, scores, tokenizer.pad_token_id)
        if config.lora:
            lora_grads.append(stats.pop("lora_grad_norm"))
        train_s = time.perf_counter() - started
        started = time.perf_counter()
        backend.sync_weights(plain_state(policy.lm))
        backend.sleep()
        sync_s = time.perf_counter() - started
        leak.step()
        record = StepRecord(
            step,
            _global_mean(scores, config),
            stats["pg_loss"],
            stats["vf_loss"],
            stats["kl"],
            stats["grad_norm"],
            gen_s,
            train_s,
            sync_s,
            sampler.sample(),
        )
        records.append(record)
        if on_step:
            on_step(record)
    lora = _lora_facts(policy, base_before, lora_grads) if config.lora else {}
    return LoopResult(records, sampler.series, backend.name, math.source, lora, policy.parameters())


def _ppo_update(config, math, policy, reference, optimizer, rollouts, scores, pad_id) -> dict[str, float]:  # type: ignore[no-untyped-def]
    import torch

    ids, attn, prompt_len = _tensors(rollouts, pad_id, config.device)
    mask = torch.ones(ids.shape[0], ids.shape[1] - prompt_len, device=config.device)
    with torch.no_grad():
        old_logp, old_values = policy.forward(ids, attn, prompt_len)
        ref_logp = _logp(reference, ids, attn, prompt_len)
        kl = old_logp - ref_logp
        token_rewards = -config.kl_coef * kl
        token_rewards[:, -1] += torch.tensor(scores, device=config.device)
        advantages, returns = math.gae(token_rewards, old_values, mask, config.gamma, config.lam)
    stats: dict[str, float] = {}
    for _ in range(config.ppo_epochs):
        logp, values = policy.forward(ids, attn, prompt_len)
        pg = math.policy_loss(old_logp, logp, advantages, mask, config.clip)
        vf = math.value_loss(values, returns, old_values, mask, config.value_clip)
        optimizer.zero_grad(set_to_none=True)
        (pg + config.vf_coef * vf).backward()
        if config.world_size > 1:
            _all_reduce_grads(policy, config.world_size)
        if config.lora:
            stats["lora_grad_norm"] = _lora_grad_norm(policy)
        grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), config.grad_clip)
        optimizer.step()
        stats.update(pg_loss=pg.item(), vf_loss=vf.item(), grad_norm=float(grad_norm))
    stats["kl"] = float(kl.mean())
    return stats


def _logp(model, ids, attn, prompt_len: int):  # type: ignore[no-untyped-def]
    import torch

    logits = model(input_ids=ids, attention_mask=attn).logits[:, prompt_len - 1 : -1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, ids[:, prompt_len:].unsqueeze(-1)).squeeze(-1)


def _lora_grad_norm(policy: ActorCritic) -> float:
    total = 0.0
    for name, param in policy.lm.named_parameters():
        if "lora_" in name and param.grad is not None:
            total += float(param.grad.detach().float().norm()) ** 2
    return total**0.5


def _base_fingerprint(policy: ActorCritic) -> dict[str, float]:
    return {n: float(p.detach().double().sum()) for n, p in policy.lm.named_parameters() if "lora_" not in n}


def _lora_facts(policy: ActorCritic, before: dict[str, float] | None, grads: list[float]) -> dict[str, Any]:
    after = _base_fingerprint(policy)
    changed = sorted(n for n, v in after.items() if before is not None and before[n] != v)
    trainable_base = sorted(n for n, p in policy.lm.named_parameters() if "lora_" not in n and p.requires_grad)
    return {
        "adapter_grad_norm_min": min(grads) if grads else 0.0,
        "base_params": len(after),
        "base_changed": changed,
        "base_trainable": trainable_base,
    }


def _global_mean(values: list[float], config: AcceptConfig) -> float:
    if config.world_size == 1:
        return sum(values) / len(values)
    import torch
    import torch.distributed as dist

    total = torch.tensor([sum(values), float(len(values))], dtype=torch.float64)
    dist.all_reduce(total)
    return float(total[0] / total[1])


def _all_reduce_grads(policy: ActorCritic, world: int) -> None:
    import torch.distributed as dist

    for param in policy.parameters():
        if param.grad is not None:
            dist.all_reduce(param.grad)
            param.grad /= world
