"""Tiny random-weight models for testing real engines without downloading weights.

A random Llama is useless as a language model but exercises everything a serving engine
does per token (prefill, decode, KV cache, prefix reuse) at a cost set by its size, so
cache effects show up clearly on a CPU. Weights come from a seeded generator: the same
arguments write the same file.

- ``write_tiny_gguf``: a llama-architecture GGUF for llama.cpp, tokenizer fields copied
  from a vocab-only GGUF (llama.cpp ships ``models/ggml-vocab-llama-spm.gguf``).
- ``write_tiny_hf_llama``: a Hugging Face ``LlamaForCausalLM`` folder (config.json,
  model.safetensors written by hand, and a word-level tokenizer over agentbench's
  synthetic vocabulary, so a synthetic word is one token there as in agentbench's counts).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentbench.errors import InputError


@dataclass(frozen=True)
class TinyLlama:
    """Shape of a tiny Llama. ``head_dim = dim / heads`` (vLLM's CPU kernels want 64+)."""

    dim: int = 512
    layers: int = 8
    heads: int = 8
    kv_heads: int = 8
    ff: int = 1408
    context: int = 8192
    seed: int = 0

    def tag(self) -> str:
        """A file-name tag that changes with every shape field."""
        return (f"d{self.dim}-l{self.layers}-h{self.heads}-kv{self.kv_heads}-f{self.ff}"
                f"-c{self.context}-s{self.seed}")


def _weights(shape: TinyLlama, vocab: int) -> dict[str, np.ndarray]:
    """Random weights by Hugging Face Llama name, numpy [out, in] layout, float32."""
    rng = np.random.default_rng(shape.seed)
    d, f = shape.dim, shape.ff
    kvd = d // shape.heads * shape.kv_heads

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float32)

    w: dict[str, np.ndarray] = {"model.embed_tokens.weight": mat(vocab, d),
                                "model.norm.weight": np.ones(d, np.float32),
                                "lm_head.weight": mat(vocab, d)}
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = np.ones(d, np.float32)
        w[p + "post_attention_layernorm.weight"] = np.ones(d, np.float32)
        w[p + "self_attn.q_proj.weight"] = mat(d, d)
        w[p + "self_attn.k_proj.weight"] = mat(kvd, d)
        w[p + "self_attn.v_proj.weight"] = mat(kvd, d)
        w[p + "self_attn.o_proj.weight"] = mat(d, d)
        w[p + "mlp.gate_proj.weight"] = mat(f, d)
        w[p + "mlp.up_proj.weight"] = mat(f, d)
        w[p + "mlp.down_proj.weight"] = mat(d, f)
    return w


_GGUF_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def _gguf_name(hf: str) -> str:
    if hf in _GGUF_NAMES:
        return _GGUF_NAMES[hf]
    _, _, i, rest = hf.split(".", 3)
    return f"blk.{i}.{_GGUF_NAMES[rest]}"


def write_tiny_gguf(path: str | Path, vocab_gguf: str | Path,
                    shape: TinyLlama = TinyLlama()) -> Path:
    """Write a random-weight llama GGUF (F16 matrices, F32 norms) with the tokenizer of
    ``vocab_gguf``; return ``path``. Needs the ``gguf`` package."""
    try:
        import gguf
    except ImportError:
        raise InputError("writing a GGUF needs the 'gguf' package (pip install gguf)") from None
    src = Path(vocab_gguf)
    if not src.is_file():
        raise InputError("no such vocab GGUF", source=str(src))
    reader = gguf.GGUFReader(str(src))
    tok_fields = {k: f for k, f in reader.fields.items() if k.startswith("tokenizer.")}
    if "tokenizer.ggml.tokens" not in tok_fields:
        raise InputError("no tokenizer in this GGUF", source=str(src),
                         field="tokenizer.ggml.tokens")
    n_vocab = len(tok_fields["tokenizer.ggml.tokens"].contents())
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    w = gguf.GGUFWriter(str(tmp), "llama")
    w.add_name(f"agentbench-tiny-{shape.tag()}")
    w.add_context_length(shape.context)
    w.add_embedding_length(shape.dim)
    w.add_block_count(shape.layers)
    w.add_feed_forward_length(shape.ff)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(shape.dim // shape.heads)
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    for name, field in tok_fields.items():
        vtype = field.types[0]
        sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, field.contents(), vtype, sub)
    for hf, arr in _weights(shape, n_vocab).items():
        w.add_tensor(_gguf_name(hf), arr if arr.ndim == 1 else arr.astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.replace(out)
    return out


# ---------------------------------------------------------------- Hugging Face


def _bf16_bits(arr: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) of a float32 array, rounded to nearest even (the
    CPU engines compute in bf16, so weights stored so load without a cast)."""
    bits = np.ascontiguousarray(arr, dtype=np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def _write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """The safetensors format by hand (8-byte header length, JSON header, raw data), so
    no torch or safetensors package is needed to write a model."""
    header: dict[str, Any] = {}
    offset = 0
    blobs = []
    for name, arr in tensors.items():
        a = np.ascontiguousarray(_bf16_bits(arr))
        header[name] = {"dtype": "BF16", "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        blobs.append(a)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for a in blobs:
            f.write(a.tobytes())


_SPECIALS = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>"]
_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def _hf_tokenizer(out: Path) -> int:
    """Write tokenizer.json (+config) with one token per synthetic word; return vocab size.

    A word-level model over agentbench's synthetic words (byte-level pre-tokenizer, so
    " baka" is the piece "Ġbaka"), plus the 256 byte symbols so any other text still
    tokenizes (a character each), plus the chat specials."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel

    from agentbench.traces.words import VOCAB

    vocab: dict[str, int] = {}
    for s in _SPECIALS:
        vocab[s] = len(vocab)
    for ch in sorted(ByteLevel.alphabet()):
        vocab.setdefault(ch, len(vocab))
    for word in VOCAB:
        vocab.setdefault("Ġ" + word.strip(), len(vocab))
    merges: list[tuple[str, str]] = []
    # BPE with merges building every synthetic word from its bytes: exact one-token words,
    # byte fallback for everything else.
    seen: set[str] = set(ByteLevel.alphabet())
    for word in VOCAB:
        piece = "Ġ" + word.strip()
        cur = piece[0]
        for ch in piece[1:]:
            nxt = cur + ch
            if nxt not in seen:
                merges.append((cur, ch))
                seen.add(nxt)
                vocab.setdefault(nxt, len(vocab))
            cur = nxt
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(_SPECIALS)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
        "eos_token": "</s>", "unk_token": "<unk>", "model_max_length": 1 << 20,
        "chat_template": _CHAT_TEMPLATE, "add_bos_token": False}, indent=1))
    (out / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}))
    return int(tok.get_vocab_size())


def write_tiny_hf_llama(path: str | Path, shape: TinyLlama = TinyLlama(dim=256, layers=4,
                                                                          heads=4, kv_heads=4,
                                                                          ff=704)) -> Path:
    """Write a random-weight Hugging Face Llama folder (BF16) that vLLM can serve."""
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    n_vocab = _hf_tokenizer(out)
    n_vocab += -n_vocab % 64  # pad the embedding rows to a multiple of 64
    _write_safetensors(out / "model.safetensors", _weights(shape, n_vocab))
    (out / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": shape.dim, "intermediate_size": shape.ff,
        "num_hidden_layers": shape.layers, "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads, "head_dim": shape.dim // shape.heads,
        "max_position_embeddings": shape.context, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "vocab_size": n_vocab, "bos_token_id": 1, "eos_token_id": 2,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "hidden_act": "silu"},
        indent=1))
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": 1, "eos_token_id": 2}))
    return out
