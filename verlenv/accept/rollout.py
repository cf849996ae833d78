"""Rollout backends behind one interface: `hf` (transformers generate) and `vllm` (LLM engine).

Each step: wake -> generate -> (reward, train) -> sync weights -> sleep, the cycle verl runs
between rollout and training. The hf backend keeps its own copy of the weights, so the sync is a
real copy, as it is for an inference engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from verlenv.accept.task import Prompt, Rollout


class RolloutBackend(Protocol):
    name: str

    def generate(self, prompts: list[Prompt], max_new_tokens: int, seed: int) -> list[Rollout]: ...

    def sync_weights(self, state: dict) -> None: ...  # type: ignore[type-arg]

    def sleep(self) -> None: ...

    def wake(self) -> None: ...


class HFRollout:
    name = "hf"

    def __init__(self, model_dir: Path, tokenizer, device: str) -> None:  # type: ignore[no-untyped-def]
        from transformers import AutoModelForCausalLM

        self.tokenizer, self.device = tokenizer, device
        self.model = AutoModelForCausalLM.from_pretrained(model_dir).to(device).eval()

    def generate(self, prompts: list[Prompt], max_new_tokens: int, seed: int) -> list[Rollout]:
        import torch

        torch.manual_seed(seed)
        batch = self.tokenizer([p.text for p in prompts], return_tensors="pt", padding=True).to(self.device)
        with torch.no_grad():
            out = self.model.generate(
                **batch,
                do_sample=True,
                top_k=0,
                top_p=1.0,
                temperature=1.0,
                max_new_tokens=max_new_tokens,
                min_new_tokens=max_new_tokens,
                pad_token_id=self.tokenizer.pad_token_id,
            )
        width = batch["input_ids"].shape[1]
        rollouts = []
        for prompt, row, mask in zip(prompts, out, batch["attention_mask"], strict=True):
            prompt_ids = tuple(int(t) for t, m in zip(row[:width], mask, strict=True) if m)
            response = tuple(int(t) for t in row[width:])
            rollouts.append(Rollout(prompt.id, prompt_ids, response, self.tokenizer.decode(response)))
        return rollouts

    def sync_weights(self, state: dict) -> None:  # type: ignore[type-arg]
        self.model.load_state_dict(state, strict=True)

    def sleep(self) -> None:  # transformers has no sleep mode; nothing to release
        return

    def wake(self) -> None:
        return


class VLLMRollout:
    """vLLM's LLM over the saved model; weights pushed in every step, sleep/wake when supported.

    Kept thin on purpose: only LLM(...), generate, sleep, wake_up and apply_model are used, the
    surface verl itself relies on. Tests drive it with an object implementing that surface.
    """

    name = "vllm"

    def __init__(
        self,
        model_dir: Path,
        tokenizer,
        llm=None,
        sampling_params=None,  # type: ignore[no-untyped-def]
        gpu_memory_utilization: float = 0.2,
    ) -> None:
        self.tokenizer = tokenizer
        if llm is None:
            from vllm import LLM, SamplingParams

            sampling_params = SamplingParams

            llm = LLM(
                model=str(model_dir),
                tokenizer=str(model_dir),
                dtype="float32",
                enforce_eager=True,
                gpu_memory_utilization=gpu_memory_utilization,
                enable_sleep_mode=True,
                seed=0,
            )
        self.llm, self.sampling_params = llm, sampling_params
        self.can_sleep = hasattr(llm, "sleep") and hasattr(llm, "wake_up")

    def generate(self, prompts: list[Prompt], max_new_tokens: int, seed: int) -> list[Rollout]:
        params = self.sampling_params(
            temperature=1.0, top_k=-1, top_p=1.0, max_tokens=max_new_tokens, min_tokens=max_new_tokens, seed=seed
        )
        outputs = self.llm.generate([p.text for p in prompts], params, use_tqdm=False)
        return [
            Rollout(p.id, tuple(o.prompt_token_ids), tuple(o.outputs[0].token_ids), o.outputs[0].text)
            for p, o in zip(prompts, outputs, strict=True)
        ]

    def sync_weights(self, state: dict) -> None:  # type: ignore[type-arg]
        items = list(state.items())
        self.llm.apply_model(lambda model: model.load_weights(weights=iter(items)))

    def sleep(self) -> None:
        if self.can_sleep:
            self.llm.sleep(level=1)

    def wake(self) -> None:
        if self.can_sleep:
            self.llm.wake_up()


def vllm_usable() -> bool:
    try:
        import torch
        import vllm  # noqa: F401
    except Exception:  # noqa: BLE001 - not installed, or broken: fall back to hf
        return False
    return bool(torch.cuda.is_available())
