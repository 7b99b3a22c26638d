"""An error body or exception text is redacted before it is cut to length: a key echoed at
the end of a long 500 body, or cut in two by either cut (the body's raw bytes, the stored
message), leaves no part of itself in ``error_message``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import aiohttp

from agentbench.results.schema import RequestRecord
from agentbench.transport import http
from agentbench.transport.http import Target, _fail, _refused

KEY = "sk-proj-0123456789abcdefghijABCDEFGHIJxyz"  # 40 characters


def _target(secrets: tuple[str, ...] = (KEY,)) -> Target:
    return Target(label="e", url="http://127.0.0.1:1/v1/chat/completions", headers={},
                  timeout=aiohttp.ClientTimeout(total=5), secrets=secrets)


def _record() -> RequestRecord:
    return RequestRecord(request_id=0, stage="s", phase="measure", endpoint="e", lane=0,
                         tree_id="t#0", session_id="t", relation="root", copy=0, turn=0,
                         scheduled_ns=0, expected_input_tokens=1, expected_output_tokens=1,
                         potential_cached_tokens=0)


def _refused_with(body: bytes, secrets: tuple[str, ...] = (KEY,)) -> str:
    rec = _record()
    resp: Any = SimpleNamespace(body=lambda partial=False: ([body], [0]), headers={},
                                reason="Internal Server Error")
    _refused(rec, resp, 500, _target(secrets))
    assert rec.error_type == "http_500" and rec.error_message is not None
    return rec.error_message


def _leaks(message: str, k: int = 4) -> list[str]:
    """Every piece of KEY of ``k`` characters or more found in ``message``."""
    return [KEY[i:j] for i in range(len(KEY)) for j in range(i + k, len(KEY) + 1)
            if KEY[i:j] in message]


def test_a_key_at_the_end_of_a_long_500_body_leaves_nothing() -> None:
    for pad in range(940, 1010, 3):  # the key across the 1,000-character cut
        msg = _refused_with(("x" * pad + "invalid key " + KEY).encode())
        assert len(msg) <= 1000 and not _leaks(msg), (pad, msg[-60:])


def test_a_key_cut_by_the_bodys_byte_limit_leaves_no_prefix() -> None:
    # two-byte characters: a 2,000-byte cut of the body falls inside the key while the
    # message is still under 1,000 characters after the key's start
    for pad in range(975, 1000):
        msg = _refused_with(("é" * pad + KEY + " trailing text").encode())
        assert not _leaks(msg), (pad, msg[-60:])
    # long secrets redacted to a few characters: wherever the body's byte limit falls
    # inside the key, the key's start would be within the message; it is dropped
    jwt = "eyJ" + "a" * 4997
    head = (jwt * 13).encode()
    for into in (1, 3, 4, 10, 20, 39):
        pad = http.ERROR_BODY_BYTES - len(head) - into
        msg = _refused_with(head + b"-" * pad + KEY.encode() + b" tail", (jwt, KEY))
        assert len(msg) < 1000 and msg.startswith("<redacted>"), msg[:20]
        assert msg.endswith("-"), (into, msg[-12:])


def test_exception_text_is_redacted_before_it_is_cut() -> None:
    for pad in range(950, 1000, 7):
        rec = _record()
        _fail(rec, "ClientError", "y" * pad + f" GET http://h/v1?key={KEY} failed", _target())
        msg = rec.error_message or ""
        assert len(msg) <= 1000 and not _leaks(msg), msg[-60:]


def test_a_key_a_500_body_spells_as_json_is_redacted() -> None:
    """An error body is kept as the JSON the server sent, where a key holding a quote or
    a slash is escaped (``\\"``, ``\\/``): it was kept whole."""
    key = 'sk-a"b/c-0123456789'
    for form in ('sk-a\\"b/c-0123456789', 'sk-a\\"b\\/c-0123456789'):
        msg = _refused_with(b'{"error": {"message": "bad key ' + form.encode() + b'"}}',
                            secrets=(key,))
        assert "bad key <redacted>" in msg and "0123456789" not in msg, msg
