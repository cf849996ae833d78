"""Rollout backends behind one interface: `hf` (transformers generate), `vllm` (LLM) and `sglang` (Engine).

Each step: wake -> generate -> (reward, train) -> sync weights -> sleep, the cycle verl runs
between rollout and training. The hf backend keeps its own copy of the weights, so the sync is a
real copy, as it is for an inference engine.
"""

from __future__ import annotations

import os
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

    Kept thin on purpose: only LLM(...), generate, sleep, wake_up, apply_model and
    reset_prefix_cache are used, the surface verl itself relies on; tests drive it with an object
    implementing that surface. The engine runs in this process (V1 without its engine-core
    subprocess), so a weight update is a function call on the model, not a serialized message.
    Prompts go in as token ids from our tokenizer and responses are decoded by it, so the reward
    sees exactly what the hf backend's would.
    """

    name = "vllm"

    def __init__(
        self,
        model_dir: Path,
        tokenizer,
        llm=None,
        sampling_params=None,  # type: ignore[no-untyped-def]
        engine_args: dict | None = None,  # type: ignore[type-arg]
    ) -> None:
        self.tokenizer = tokenizer
        if llm is None:
            llm, sampling_params = _engine(model_dir, engine_args or {})
        self.llm, self.sampling_params = llm, sampling_params
        self.can_sleep = hasattr(llm, "sleep") and hasattr(llm, "wake_up")

    def generate(self, prompts: list[Prompt], max_new_tokens: int, seed: int) -> list[Rollout]:
        # One seed per request: the same seed on every request of a batch draws the same random
        # numbers for each, so a tiny model answers every prompt alike (seen on the H200: batch
        # rewards in multiples of 1/6) and the batch is worth one sample.
        params = [
            self.sampling_params(
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_tokens=max_new_tokens,
                min_tokens=max_new_tokens,
                seed=seed * 100_003 + index,
                detokenize=False,
            )
            for index in range(len(prompts))
        ]
        ids = [self.tokenizer(p.text)["input_ids"] for p in prompts]
        outputs = self.llm.generate([{"prompt_token_ids": i} for i in ids], params, use_tqdm=False)
        rollouts = []
        for prompt, prompt_ids, out in zip(prompts, ids, outputs, strict=True):
            response = tuple(out.outputs[0].token_ids)
            rollouts.append(Rollout(prompt.id, tuple(prompt_ids), response, self.tokenizer.decode(response)))
        return rollouts

    def sync_weights(self, state: dict) -> None:  # type: ignore[type-arg]
        items = list(state.items())
        self.llm.apply_model(lambda model: model.load_weights(weights=iter(items)))
        if hasattr(self.llm, "reset_prefix_cache"):  # cached KV of the old weights must not be reused
            self.llm.reset_prefix_cache()

    def sleep(self) -> None:
        if self.can_sleep:
            self.llm.sleep(level=1)

    def wake(self) -> None:
        if self.can_sleep:
            self.llm.wake_up()


def _engine(model_dir: Path, engine_args: dict):  # type: ignore[no-untyped-def, type-arg]
    # In-process engine core: apply_model then calls our function on the model directly (with the
    # engine-core subprocess it would have to be pickled, tensors and all).
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM, SamplingParams

    return LLM(**vllm_args(model_dir, engine_args)), SamplingParams


def vllm_args(model_dir: Path, engine_args: dict) -> dict:  # type: ignore[type-arg]
    args = {
        "model": str(model_dir),
        "tokenizer": str(model_dir),
        "dtype": "bfloat16",  # as verl rolls out: bf16 engine, fp32 trainer; the trainer recomputes log-probs
        # no enforce_eager: vLLM's default mode (torch.compile through Inductor and Triton, CUDA graphs)
        # is what users run, and what needs a compiler in the image; eager is --engine-arg enforce_eager=true
        "gpu_memory_utilization": 0.2,
        "enable_sleep_mode": True,
        "enable_prefix_caching": False,
        "max_model_len": 64,
        "seed": 0,
    }
    return args | engine_args


class SGLangRollout:
    """SGLang's offline Engine over the saved model, driven as verl drives it between rollout and training:
    weights pushed with update_weights_from_tensor every step, memory released after the update
    (release_memory_occupation, through torch_memory_saver) and resumed before the next rollout.
    Prompts go in as our token ids, responses come back as ids and are decoded by our tokenizer.
    Tests drive it with an object implementing that surface of sglang.Engine.
    """

    name = "sglang"

    def __init__(self, model_dir: Path, tokenizer, engine=None, engine_args: dict | None = None) -> None:  # type: ignore[no-untyped-def, type-arg]
        self.tokenizer = tokenizer
        self.engine = engine if engine is not None else _sglang_engine(model_dir, engine_args or {})
        self.released = False  # SGLang refuses to resume what it did not release (KeyError 'kv_cache')
        self.pending: list = []  # type: ignore[type-arg]

    def generate(self, prompts: list[Prompt], max_new_tokens: int, seed: int) -> list[Rollout]:
        ids = [self.tokenizer(p.text)["input_ids"] for p in prompts]
        params = [
            {
                "temperature": 1.0,
                "top_p": 1.0,
                "top_k": -1,
                "max_new_tokens": max_new_tokens,
                # fixed length as min_tokens gives vLLM; SGLang's min_new_tokens needs its tokenizer,
                # which skip_tokenizer_init leaves out (AttributeError in the scheduler, seen on the H200)
                "ignore_eos": True,
                "sampling_seed": seed * 100_003 + index,  # one seed per request, as for vLLM
            }
            for index in range(len(prompts))
        ]
        outputs = self.engine.generate(input_ids=ids, sampling_params=params)
        rollouts = []
        for prompt, prompt_ids, out in zip(prompts, ids, outputs, strict=True):
            response = tuple(out["output_ids"])
            rollouts.append(Rollout(prompt.id, tuple(prompt_ids), response, self.tokenizer.decode(response)))
        return rollouts

    def sync_weights(self, state: dict) -> None:  # type: ignore[type-arg]
        # Released weights come back as undefined memory, so verl pushes them after resuming the
        # weights and before resuming the KV cache; so do we. Awake, they go in at once.
        self.pending = list(state.items())
        if not self.released:
            self._push()

    def _push(self) -> None:
        result = self.engine.update_weights_from_tensor(self.pending, flush_cache=True)
        if isinstance(result, tuple) and not result[0]:
            raise RuntimeError(f"SGLang refused the weight update: {result[1]}")

    def sleep(self) -> None:
        self.engine.release_memory_occupation()
        self.released = True

    def wake(self) -> None:
        if not self.released:
            return
        self.engine.resume_memory_occupation(tags=["weights"])
        self._push()
        self.engine.resume_memory_occupation(tags=["kv_cache", "cuda_graph"])
        self.released = False


def _sglang_engine(model_dir: Path, engine_args: dict):  # type: ignore[no-untyped-def, type-arg]
    import sglang

    args = {
        "model_path": str(model_dir),
        "dtype": "bfloat16",
        "mem_fraction_static": 0.2,
        "enable_memory_saver": True,  # what release/resume_memory_occupation need (torch_memory_saver)
        # CUDA graphs on, as verl runs SGLang by default (disable_cuda_graph = rollout.enforce_eager, False),
        # with the attention backend verl picks: FA3's graph capture is broken on sglang>=0.5.12, so verl
        # takes flashinfer there (verl 0.9.1 async_sglang_server.py; sglang #22800)
        "attention_backend": _verl_attention_backend(),
        "skip_tokenizer_init": True,  # ids in, ids out: our tokenizer encodes and decodes, as for vLLM
        # flashinfer's sampling kernels compile at first use unless its prebuilt cubins are installed;
        # torch's sampling gives the same distribution and needs no compiler on the host.
        "sampling_backend": "pytorch",
        "random_seed": 0,
        "log_level": "error",
    }
    return sglang.Engine(**(_supported(args) | engine_args))


def _verl_attention_backend() -> str:
    try:
        import sglang
        from packaging.version import Version

        return "flashinfer" if Version(sglang.__version__) >= Version("0.5.12") else "fa3"
    except Exception:  # noqa: BLE001 - version unknown: SGLang's own choice
        return ""


def compiled_mode(backend: str, engine_args: dict) -> bool:  # type: ignore[type-arg]
    """Does the rollout engine compile and capture CUDA graphs (the default modes), or run eager?"""
    if backend == "vllm":
        return not engine_args.get("enforce_eager", False)
    if backend == "sglang":
        return not engine_args.get("disable_cuda_graph", False)
    return False


def mode_name(backend: str, engine_args: dict) -> str:  # type: ignore[type-arg]
    if backend == "vllm":
        return "vLLM default: torch.compile + CUDA graphs" if compiled_mode(backend, engine_args) else "vLLM eager"
    if backend == "sglang":
        return "SGLang with CUDA graphs" if compiled_mode(backend, engine_args) else "SGLang eager"
    return backend


def _supported(defaults: dict) -> dict:  # type: ignore[type-arg]
    """Our defaults that this SGLang knows (0.5.5 has no disable_piecewise_cuda_graph: it would be a
    TypeError); what the user passes with --engine-arg goes through as given."""
    try:
        import dataclasses

        from sglang.srt.server_args import ServerArgs
    except ImportError:
        return defaults
    known = {f.name for f in dataclasses.fields(ServerArgs)}
    return {k: v for k, v in defaults.items() if k in known and v != ""}


def engine_usable(module: str) -> bool:
    """The engine imports and a GPU is there; not installed, or broken, means falling back to hf."""
    try:
        import importlib

        import torch

        importlib.import_module(module)
    except Exception:  # noqa: BLE001 - not installed, or broken: fall back
        return False
    return bool(torch.cuda.is_available())
