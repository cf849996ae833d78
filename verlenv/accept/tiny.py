"""A tiny causal LM and tokenizer made on the spot (random init, fixed seed), saved in HF format."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

WORDS = [f"w{i}" for i in range(48)]
SPECIAL = ["[PAD]", "[BOS]", "[EOS]", "[UNK]"]


@dataclass(frozen=True)
class TinySpec:
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 128
    max_positions: int = 64
    seed: int = 0


# For inference engines (vLLM): their attention kernels take head sizes that are multiples of 8 and
# fp16/bf16 weights; 128 / 2 heads = 64 is a size every backend has. Still tiny: about 0.2 M parameters.
ENGINE_SPEC = TinySpec(hidden=128, heads=2, kv_heads=1, intermediate=256)


def make_tokenizer(where: Path):  # type: ignore[no-untyped-def]
    """A word-level tokenizer over WORDS, trained by `tokenizers` on generated text."""
    import random

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(0)
    corpus = [" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(2000)]
    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=SPECIAL, vocab_size=len(WORDS) + 8))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="[PAD]", bos_token="[BOS]", eos_token="[EOS]", unk_token="[UNK]"
    )
    fast.padding_side = "left"  # decoder-only generation pads on the left
    fast.save_pretrained(where)
    return fast


def make_model(where: Path, vocab_size: int, tokenizer, spec: TinySpec = TinySpec()):  # type: ignore[no-untyped-def]
    """A Qwen2-family model with random weights; the same seed gives the same weights."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(spec.seed)
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=spec.hidden,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads,
        intermediate_size=spec.intermediate,
        max_position_embeddings=spec.max_positions,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(where)
    return model


def make_tiny(where: Path, spec: TinySpec = TinySpec()):  # type: ignore[no-untyped-def]
    where.mkdir(parents=True, exist_ok=True)
    tokenizer = make_tokenizer(where)
    model = make_model(where, len(tokenizer), tokenizer, spec)
    return tokenizer, model


def load_tiny(where: Path):  # type: ignore[no-untyped-def]
    """The model and tokenizer make_tiny saved (data-parallel ranks share one copy made up front)."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(where)
    tokenizer.padding_side = "left"
    return tokenizer, AutoModelForCausalLM.from_pretrained(where)
