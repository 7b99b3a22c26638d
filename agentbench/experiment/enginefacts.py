"""What a run says about its engine beyond the records (``sim fit``, ``sim check``): the
engine family, KV capacity and block size, slots and step budget, from the scenario's
server command and the engine's scraped metrics (docs/simulator.md, "Fitting a preset")."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentbench.scenario.endpoints import is_simulated


@dataclass
class EngineFacts:
    """What a run says about its engine beyond the records (None: not said)."""

    family: str = "openai"  # "vllm", "llama.cpp" or the endpoint kind
    kv_capacity_tokens: int | None = None
    block_size: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    #: the context window the engine enforces per request, in its own tokens
    max_context_tokens: int | None = None
    #: a llama.cpp server's host-RAM prompt cache: 0 when the command turns it off
    #: (``--cache-ram 0``); None: its default (or a size agentbench cannot convert)
    ram_cache_tokens: int | None = None
    #: the engine's prompt tokens per token of the simulator's count (its tokenizer)
    token_ratio: float = 1.0
    #: the same on the longest prompts, the lowest there (None: ``token_ratio``): it
    #: converts the context window, so a prompt the engine served is not refused
    long_prompt_ratio: float | None = None
    engine_version: str | None = None  # as the engine's log says it (vLLM's banner)
    longest_prompt: float = 0.0  # the longest prompt fitted on, the simulator's tokens
    #: the engines the run's requests were spread over: its endpoints, a simulated one's
    #: instances (a router's back ends cannot be counted from here); a fit is of one
    engines: int = 1
    sources: dict[str, str] = field(default_factory=dict)


def _flag(argv: list[str], *names: str) -> str | None:
    """The value after the last of ``names`` in ``argv`` (``--name=value`` too)."""
    val = None
    for i, a in enumerate(argv):
        for n in names:
            if a == n and i + 1 < len(argv):
                val = argv[i + 1]
            elif a.startswith(n + "=") and n.startswith("--"):
                val = a.split("=", 1)[1]
    return val


def _int(v: Any) -> int | None:
    try:
        n = int(float(v))
    except (TypeError, ValueError, OverflowError):
        return None
    return n if 0 < n < 1 << 40 else None


#: vLLM's human-readable integers (``utils/argparse_utils.human_readable_int``, 0.32):
#: ``k``/``m``/``g``/``t`` decimal, ``K``/``M``/``G``/``T`` binary (whole numbers only)
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _human_int(v: str | None) -> int | None:
    """``v`` as vLLM reads ``--max-model-len`` and ``--max-num-batched-tokens`` (``4096``,
    ``4k`` = 4,000, ``4K`` = 4,096, ``25.6k``); None for ``auto``, ``-1`` or anything
    else."""
    if v is None:
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", v.strip())
    if m is None:
        return _int(v) if re.fullmatch(r"\d+", v.strip()) else None
    number, suffix = m.groups()
    if suffix in _BINARY:
        return _int(int(number) * _BINARY[suffix]) if number.isdigit() else None
    return _int(int(float(number) * _DECIMAL[suffix]))


def log_version(path: Path) -> str | None:
    """The engine version a server log states in its first 64 KiB (vLLM: ``version
    0.11.0``), or None."""
    try:
        with path.open("rb") as f:
            head = f.read(1 << 16).decode("utf-8", "replace")
    except (OSError, ValueError):
        return None
    m = re.search(r"\bversion (\d+\.\d+(?:\.\d+)?[\w.+-]*)", head)
    return m.group(1) if m else None


def engine_facts(scenario: dict[str, Any], server_metrics: Any) -> EngineFacts:
    """The engine family, KV capacity and scheduler limits a run's scenario (its server
    command) and scraped metrics state."""
    server = scenario.get("server") or {}
    cmd = server.get("command") or ""
    argv = shlex.split(cmd) if isinstance(cmd, str) else [str(a) for a in cmd]
    text = " ".join(argv)
    f = EngineFacts()
    f.engines = sum((_int(e.get("instances")) or 1) if is_simulated(e) else 1
                    for e in scenario.get("endpoints") or [] if isinstance(e, dict)) or 1
    if "llama-server" in text or "llama_server" in text:
        f.family = "llama.cpp"
        n_ctx, slots = _int(_flag(argv, "-c", "--ctx-size")), _int(_flag(argv, "-np",
                                                                          "--parallel"))
        f.kv_capacity_tokens, f.max_num_seqs = n_ctx, slots
        f.max_num_batched_tokens = _int(_flag(argv, "-b", "--batch-size")) or 2048
        f.block_size = 1
        f.sources.update(kv_capacity_tokens="the server command's -c (n_ctx)",
                         max_num_seqs="the server command's -np (slots)",
                         max_num_batched_tokens="the server command's -b (n_batch; "
                         "llama-server's default 2048)",
                         block_size="llama.cpp reuses a prompt token by token")
        if _flag(argv, "-cram", "--cache-ram") in ("0", "0.0"):
            f.ram_cache_tokens = 0
            f.sources["ram_cache_tokens"] = "the server command's --cache-ram 0 (no RAM cache)"
        # without -np (or -np -1) llama-server runs 4 slots sharing one KV buffer; each of
        # -np slots holds n_ctx / np tokens and refuses a longer prompt, unless the slots
        # share one unified buffer (-kvu)
        auto = slots is None
        if auto:
            f.max_num_seqs = slots = 4
            f.sources["max_num_seqs"] = "llama-server's default (-np auto: 4 slots)"
        unified = not any(a in ("-no-kvu", "--no-kv-unified") for a in argv) and (
            auto or any(a in ("-kvu", "--kv-unified") for a in argv))
        if n_ctx:
            f.max_context_tokens = n_ctx if unified else n_ctx // (slots or 1)
            f.sources["max_context_tokens"] = (
                "the server command's -c (n_ctx), the slots sharing it (-kvu"
                + (", llama-server's default without -np)" if auto else ")") if unified
                else "the server command's -c (n_ctx) / -np (slots): one slot's context")
    elif "vllm" in text:
        f.family = "vllm"
        f.max_num_seqs = _int(_flag(argv, "--max-num-seqs"))
        f.max_num_batched_tokens = _human_int(_flag(argv, "--max-num-batched-tokens"))
        f.block_size = _int(_flag(argv, "--block-size"))
        f.max_context_tokens = _human_int(_flag(argv, "--max-model-len", "--max_model_len"))
        for k, what in (("max_num_seqs", "--max-num-seqs"),
                        ("max_num_batched_tokens", "--max-num-batched-tokens"),
                        ("block_size", "--block-size"),
                        ("max_context_tokens", "--max-model-len")):
            if getattr(f, k) is not None:
                f.sources[k] = f"the server command's {what}"
        if any(str(k).startswith("VLLM_CPU") for k in server.get("env") or {}):
            # vLLM's CPU defaults for the OpenAI server (engine/arg_utils.py, 0.x)
            for k, v in (("max_num_seqs", 128), ("max_num_batched_tokens", 2048)):
                if getattr(f, k) is None:
                    setattr(f, k, v)
                    f.sources[k] = "vLLM's default on CPU for the OpenAI server"
    sm = server_metrics
    if sm is not None and len(sm) and "name" in sm:
        info = sm[sm["name"] == "vllm:cache_config_info"]
        if len(info):
            labels = _labels(info.iloc[-1]["labels"])
            blocks, bs = _int(labels.get("num_gpu_blocks")), _int(labels.get("block_size"))
            if blocks and bs:
                f.family = "vllm"
                f.kv_capacity_tokens, f.block_size = blocks * bs, bs
                f.sources.update(kv_capacity_tokens="vLLM's cache_config_info "
                                 f"(num_gpu_blocks {blocks} x block_size {bs})",
                                 block_size="vLLM's cache_config_info")
            seqs = _int(labels.get("max_num_seqs"))
            if seqs and f.max_num_seqs is None:
                f.max_num_seqs = seqs
                f.sources["max_num_seqs"] = "vLLM's cache_config_info"
    return f


def _labels(v: Any) -> dict[str, str]:
    if isinstance(v, dict):
        return {str(k): str(x) for k, x in v.items()}
    if isinstance(v, list):  # pyarrow map as a list of pairs
        return {str(k): str(x) for k, x in v}
    out = {}
    for part in str(v or "").split(","):
        k, _, x = part.partition("=")
        out[k.strip()] = x.strip()
    return out
