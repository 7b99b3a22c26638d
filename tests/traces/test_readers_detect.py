"""Format detection from content (no format given)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentbench.errors import InputError
from agentbench.traces.readers import detect_format

SAMPLES: dict[str, tuple[str, object, bool]] = {
    # format: (file name, content, as JSONL)
    "mooncake": ("m.jsonl", [{"timestamp": 0, "input_length": 5, "output_length": 1,
                              "hash_ids": [1]}], True),
    "bailian": ("b.jsonl", [{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.5,
                             "input_length": 5, "output_length": 1, "turn": 1,
                             "hash_ids": [1]}], True),
    "sharegpt": ("s.jsonl", [{"conversations": [{"from": "human", "value": "hi"}]}], True),
    "openai-log": ("o.jsonl", [{"timestamp": 1.0, "body": {"messages": []}}], True),
    "copilot": ("c.json", {"window_start": "2026-06-01",
                           "records": [{"session_id": "s", "turns": []}]}, False),
    "weka": ("w.json", {"id": "w", "block_size": 64, "requests": []}, False),
}


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_detected_from_content(tmp_path: Path, fmt: str) -> None:
    name, content, lines = SAMPLES[fmt]
    f = tmp_path / name
    f.write_text("\n".join(json.dumps(r) for r in content) if lines  # type: ignore[attr-defined]
                 else json.dumps(content))
    assert detect_format(f) == fmt
    # the name does not decide: the same content under another suffix
    g = tmp_path / "trace.data"
    g.write_bytes(f.read_bytes())
    assert detect_format(g) == fmt


def test_unknown_content_is_an_input_error(tmp_path: Path) -> None:
    f = tmp_path / "x.jsonl"
    f.write_text('{"foo": 1}\n')
    with pytest.raises(InputError, match="cannot detect"):
        detect_format(f)


def test_missing_local_file_is_not_taken_for_a_hub_id(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match="no such file"):
        detect_format("traces/missing.jsonl")
    assert detect_format("org/dataset-name") == "hf"
    # a missing name inside a local folder is a mistyped path, not a hub id (it went to
    # the hub: 25 s of retries, then a ConnectionError)
    (tmp_path / "mydir").mkdir()
    with pytest.raises(InputError, match="no such file"):
        detect_format("mydir/traces")
    from agentbench.traces.readers import looks_like_hub_id

    assert looks_like_hub_id("mydir/traces", tmp_path / "elsewhere")
    assert not looks_like_hub_id("mydir/traces", tmp_path)


def test_a_conversation_dataset_of_messages_reads_as_conversations(tmp_path: Path) -> None:
    """A SWE-style JSONL (``{"messages": [...]}`` per line, no times) was taken for a
    request log and failed on "timestamp: missing"; it is a set of conversations. A
    request log names its time, and stays one."""
    from agentbench.traces.readers import read_trace

    f = tmp_path / "swe.jsonl"
    f.write_text("\n".join(json.dumps({"messages": [
        {"role": "system", "content": "You fix bugs."}, {"role": "user", "content": f"bug {i}"},
        {"role": "assistant", "content": "patched"}]}) for i in range(3)))
    assert detect_format(f) == "sharegpt"
    assert len(read_trace(f).sessions) == 3
    g = tmp_path / "log.jsonl"
    g.write_text(json.dumps({"timestamp": 1.0, "messages": [{"role": "user",
                                                             "content": "x"}]}))
    assert detect_format(g) == "openai-log"


@pytest.mark.parametrize("fmt", ["mooncake", "bailian", "sharegpt", "openai-log"])
def test_a_gzipped_file_of_a_plain_text_reader_is_one_error_saying_so(
        tmp_path: Path, fmt: str) -> None:
    """Detection reads through gzip and named the format; its reader then read the gzip
    bytes as text: "line 1: invalid JSON (not UTF-8 text)" for a file that is fine."""
    import gzip

    from agentbench.traces.readers import read_trace

    name, content, _ = SAMPLES[fmt]
    f = tmp_path / f"{name}.gz"
    assert isinstance(content, list)
    f.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in content).encode()))
    assert detect_format(f) == fmt
    with pytest.raises(InputError, match=f"gzipped: the {fmt} reader reads plain text"):
        read_trace(f)
