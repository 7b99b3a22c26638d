"""Text traces into the model: chat messages -> token ids -> prefix-chained block hash ids,
and think time drawn from a published inter-call delay distribution.

Block hashing is prefix-chained: a block's id is a hash of the previous block's id and the
block's own token ids, so two prompts get equal leading ids exactly as far as their token
sequences are equal (block-aligned), and a partial last block gets an id of its own. Ids
are content hashes, so one hash scope can span every conversation of a source.

A chat prompt is laid out as the chat template cost of ``agentbench.traces.words``: each
message is ``<role> content <end>`` (2 marker tokens) and the prompt ends with the reply
primer ``<assistant>``, so a turn's prompt is a prefix of the next turn's (whose history
holds the reply as ``<assistant> reply <end>``), and its length equals
``chat_prompt_tokens`` under the approximate tokenizer.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources
from statistics import NormalDist
from typing import Any

import numpy as np
import yaml

from agentbench.errors import InputError
from agentbench.traces.model import HashIds

# Marker token ids (negative: never a real token id) for the chat template.
ROLE_IDS: dict[str, int] = {"system": -1, "user": -2, "assistant": -3, "tool": -4,
                            "developer": -1, "function": -4}
OTHER_ROLE_ID = -5
END_ID = -9
#: sharegpt speaker names -> chat roles
SHAREGPT_ROLES: dict[str, str] = {
    "system": "system", "human": "user", "user": "user", "gpt": "assistant",
    "assistant": "assistant", "chatgpt": "assistant", "bing": "assistant", "bard": "assistant",
    "tool": "tool", "function": "tool", "function_call": "assistant", "observation": "tool",
}
DEFAULT_BLOCK_SIZE = 64


def message_token_ids(encode_ids: list[int], role: str) -> list[int]:
    """``<role> content <end>`` for content already encoded."""
    return [ROLE_IDS.get(role, OTHER_ROLE_ID), *encode_ids, END_ID]


def primer_ids() -> list[int]:
    return [ROLE_IDS["assistant"]]


def _chain(prev: int, block: np.ndarray) -> int:
    h = hashlib.blake2b(prev.to_bytes(8, "little", signed=True), digest_size=8)
    h.update(block.tobytes())
    return int.from_bytes(h.digest(), "little") >> 1  # non-negative int63


class PromptHasher:
    """Block hash ids of successive prompts; reuses the ids of the longest block-aligned
    prefix shared with the previous prompt, so a growing conversation hashes each block
    once."""

    def __init__(self, block_size: int) -> None:
        if block_size <= 0:
            raise InputError("must be positive", field="block_size")
        self.block_size = block_size
        self._tokens = np.zeros(0, dtype=np.int64)
        self._full: list[int] = []  # ids of the full blocks of the previous prompt

    def hash_ids(self, tokens: Sequence[int] | np.ndarray) -> HashIds:
        arr = np.asarray(tokens, dtype=np.int64)
        bs = self.block_size
        n_full = len(arr) // bs
        prev = self._tokens
        same = min(len(prev), len(arr))
        if same:
            diff = np.flatnonzero(prev[:same] != arr[:same])
            same = int(diff[0]) if diff.size else same
        keep = min(same // bs, len(self._full), n_full)
        full = self._full[:keep]
        last = full[-1] if full else 0
        for b in range(keep, n_full):
            last = _chain(last, arr[b * bs:(b + 1) * bs])
            full.append(last)
        out = list(full)
        if len(arr) % bs:
            out.append(_chain(last, arr[n_full * bs:]))
        self._tokens = arr
        self._full = full
        return np.asarray(out, dtype=np.int64)


@lru_cache(maxsize=1)
def _published() -> dict[str, Any]:
    text = resources.files("agentbench.traces").joinpath("published.yaml").read_text()
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def lognormal_fit(quantiles: dict[float, float]) -> tuple[float, float]:
    """(mu, sigma) of a log-normal through published quantiles ``{p: value}``.

    The median fixes ``mu = ln(q50)``; ``sigma`` is the least-squares fit in log space of
    the other quantiles: ``sigma = sum(z_p * ln(q_p / q50)) / sum(z_p^2)``, with ``z_p`` the
    standard normal quantile of ``p``.
    """
    if 0.5 not in quantiles:
        raise ValueError("the fit needs the median")
    mu = math.log(quantiles[0.5])
    num = den = 0.0
    for p, q in quantiles.items():
        if p == 0.5:
            continue
        z = NormalDist().inv_cdf(p)
        num += z * (math.log(q) - mu)
        den += z * z
    return mu, num / den if den else 0.0


def codex_delay_fit() -> tuple[float, float]:
    """Log-normal (mu, sigma) of the Codex SWE-bench Pro inter-call delay (published.yaml:
    median 5.2 s, p90 23.0 s, p99 81.4 s). The fit gives median 5.2 s, p90 23.5 s (+2%),
    p99 80.4 s (-1%)."""
    d = _published()["codex"]["inter_call_delay_s"]
    return lognormal_fit({0.5: float(d["median"]), 0.9: float(d["p90"]),
                          0.99: float(d["p99"])})


def draw_think_times(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` think times (seconds) from the Codex inter-call delay fit.

    The published figure is start-to-start; text traces record no response time, so the
    draw stands for the whole gap and is used as the think time (end-to-start).
    """
    mu, sigma = codex_delay_fit()
    return rng.lognormal(mu, sigma, size=n)


def content_text(content: Any) -> str:
    """Text of an OpenAI message ``content``: a string, or a list of parts whose text
    parts are joined (other parts, e.g. images, count as their JSON)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                out.append(part["text"])
            elif isinstance(part, str):
                out.append(part)
            else:
                import json

                out.append(json.dumps(part, sort_keys=True))
        return "".join(out)
    raise InputError(f"expected a string or a list of parts, got {type(content).__name__}",
                     field="content")


def iter_file_records(path: Any) -> Any:
    """(where, record) of a ``.jsonl`` file (one object per line) or a ``.json`` file (an
    array of objects, or one object)."""
    from pathlib import Path

    from agentbench.traces.readers._fields import iter_jsonl, load_json

    p = Path(path)
    if p.suffix == ".jsonl" or (p.suffix != ".json" and _looks_jsonl(p)):
        for lineno, rec in iter_jsonl(p):
            yield f"line {lineno}", rec
        return
    doc = load_json(p)
    items = doc if isinstance(doc, list) else [doc]
    for i, rec in enumerate(items):
        if not isinstance(rec, dict):
            raise InputError("expected a JSON object", source=str(p), where=f"record {i}")
        yield f"record {i}", rec


def _looks_jsonl(p: Any) -> bool:
    """Whether the first line is a whole JSON object (then the file is JSONL)."""
    import json

    from agentbench.traces.readers._fields import first_line

    line = first_line(p)
    if not line.startswith(b"{"):
        return False
    try:
        json.loads(line)
        return True
    except (ValueError, RecursionError):
        return False


def reject_unknown(options: dict[str, Any], fmt: str) -> None:
    """A misspelt reader option is an error, not silently ignored."""
    if options:
        name = next(iter(options))
        raise InputError(f"unknown option {name!r} for the {fmt} reader", field=name)
