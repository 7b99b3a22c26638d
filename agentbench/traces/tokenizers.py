"""Tokenizers for text traces: the approximate one by default, an exact Hugging Face
``tokenizers`` one when the user names a ``tokenizer.json`` file or a hub id.

Readers of text formats (sharegpt, openai-log) turn messages into token ids with the
returned object, then into block hash ids; the count they report is ``len(encode(text))``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from agentbench.errors import InputError
from agentbench.traces import words as approx


class Tokenizer(Protocol):
    """What readers need: token ids of a text, and their number."""

    name: str

    def encode(self, text: str) -> list[int]: ...

    def count(self, text: str) -> int: ...


class ApproxTokenizer:
    """The dependency-free approximate tokenizer of ``agentbench.traces.words``."""

    name = "approx"

    def encode(self, text: str) -> list[int]:
        return approx.token_ids(text)

    def count(self, text: str) -> int:
        return approx.count_tokens(text)


class HFTokenizer:
    """An exact tokenizer: Hugging Face ``tokenizers`` (no special tokens added)."""

    def __init__(self, tok: Any, name: str) -> None:
        self._tok = tok
        self.name = name

    def encode(self, text: str) -> list[int]:
        try:
            ids: list[int] = self._tok.encode(text, add_special_tokens=False).ids
        except (UnicodeEncodeError, TypeError):  # lone surrogates (legal in JSON): as U+FFFD
            text = text.encode("utf-8", "replace").decode("utf-8")
            ids = self._tok.encode(text, add_special_tokens=False).ids
        return ids

    def count(self, text: str) -> int:
        return len(self.encode(text))


def get_tokenizer(spec: str | Path | None) -> ApproxTokenizer | HFTokenizer:
    """``None`` or ``"approx"``: the approximate tokenizer; a ``tokenizer.json`` path (or a
    folder holding one): that file; anything else: a Hugging Face hub id (needs a network
    or a local hub cache)."""
    if spec is None or str(spec) == "approx":
        return ApproxTokenizer()
    if not isinstance(spec, str | Path):  # -O tokenizer=3 (YAML's int) was a TypeError
        raise InputError(f"expected a tokenizer.json path or a hub id, got {spec!r}",
                         field="tokenizer")
    from tokenizers import Tokenizer as _HFTok

    path = Path(spec)
    if path.is_dir():
        path = path / "tokenizer.json"
    if path.is_file():
        try:
            return HFTokenizer(_HFTok.from_file(str(path)), name=str(spec))
        except Exception as e:  # the library raises its own exception types
            raise InputError(f"not a tokenizer.json file ({e})", source=str(spec),
                             field="tokenizer") from None
    if str(spec).endswith(".json") or str(spec).startswith((".", "/")):
        raise InputError("no such tokenizer file", source=str(spec), field="tokenizer")
    try:
        return HFTokenizer(_HFTok.from_pretrained(str(spec)), name=str(spec))
    except Exception as e:
        raise InputError(f"cannot load tokenizer from the hub ({e})", source=str(spec),
                         field="tokenizer") from None
