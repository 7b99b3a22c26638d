"""Hugging Face datasets reader: tiny datasets built here (never the network)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentbench.errors import InputError
from agentbench.traces.readers import detect_format, read_trace

datasets = pytest.importorskip("datasets")

MOONCAKE = [
    {"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [0, 1]},
    {"timestamp": 2000, "input_length": 1536, "output_length": 20, "hash_ids": [0, 1, 2]},
]
SHAREGPT = [{"conversations": [
    {"from": "human", "value": "Write a haiku about caches."},
    {"from": "gpt", "value": "Warm blocks stay resident."},
    {"from": "human", "value": "Another."},
    {"from": "gpt", "value": "Prefix shared, nothing recomputed."},
]}]


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never download: the libraries read these flags at import, so set both."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True, raising=False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True, raising=False)


def test_saved_dataset_folder_routes_rows_to_the_detected_reader(tmp_path: Path) -> None:
    folder = tmp_path / "mc"
    datasets.Dataset.from_list(MOONCAKE).save_to_disk(str(folder))
    assert detect_format(folder) == "hf"
    tr = read_trace(folder)
    direct = tmp_path / "mc.jsonl"
    direct.write_text("".join(json.dumps(r) + "\n" for r in MOONCAKE))
    ref = read_trace(direct)
    assert [s.start_s for s in tr.sessions] == [s.start_s for s in ref.sessions] == [0.0, 2.0]
    assert [s.turns[0].hash_ids.tolist() for s in tr.sessions] == [[0, 1], [0, 1, 2]]
    assert [s.turns for s in tr.sessions] == [s.turns for s in ref.sessions]


def test_dataset_dict_split_and_sharegpt_rows(tmp_path: Path) -> None:
    folder = tmp_path / "sg"
    datasets.DatasetDict({"test": datasets.Dataset.from_list(SHAREGPT)}).save_to_disk(
        str(folder))
    tr = read_trace(folder, format="hf", seed=3)
    ref_file = tmp_path / "sg.json"
    ref_file.write_text(json.dumps(SHAREGPT))
    ref = read_trace(ref_file, seed=3)
    assert [t.input_tokens for t in tr.sessions[0].turns] == [
        t.input_tokens for t in ref.sessions[0].turns]
    assert [t.think_s for t in tr.sessions[0].turns] == [t.think_s for t in ref.sessions[0].turns]
    with pytest.raises(InputError, match="no split") as e:
        read_trace(folder, format="hf", split="train2")
    assert e.value.field == "split"


def test_local_data_file_through_load_dataset(tmp_path: Path) -> None:
    f = tmp_path / "rows.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in MOONCAKE))
    tr = read_trace(f, format="hf")
    assert tr.n_requests() == 2 and tr.sessions[1].turns[0].input_tokens == 1536


def test_bad_rows_and_missing_datasets_are_input_errors(tmp_path: Path) -> None:
    folder = tmp_path / "bad"
    datasets.Dataset.from_list([*MOONCAKE, {**MOONCAKE[0], "input_length": -3}]).save_to_disk(
        str(folder))
    with pytest.raises(InputError) as e:
        read_trace(folder)
    assert (e.value.where, e.value.field) == ("record 2", "input_length")
    with pytest.raises(InputError, match="cannot load dataset|not found"):
        read_trace("nobody/no-such-dataset-here", format="hf")


def test_weka_documents_as_rows(tmp_path: Path) -> None:
    doc = {"id": "w1", "block_size": 64, "hash_id_scope": "local", "requests": [
        {"t": 0.0, "type": "n", "in": 130, "out": 2, "hash_ids": [1, 2, 3]},
        {"t": 1.0, "type": "subagent", "agent_id": "a", "requests": [
            {"t": 0.0, "type": "n", "in": 10, "out": 1, "hash_ids": [9]}]},
        {"t": 2.0, "type": "n", "in": 200, "out": 2, "hash_ids": [1, 2, 3, 4]}]}
    folder = tmp_path / "weka"
    datasets.Dataset.from_list([doc, {**doc, "id": "w2"}]).save_to_disk(str(folder))
    tr = read_trace(folder)
    f = tmp_path / "w1.json"
    f.write_text(json.dumps(doc))
    ref = read_trace(f)
    assert [s.session_id for s in tr.sessions] == ["w1", "w1/a", "w2", "w2/a"]
    assert [s.turns for s in tr.sessions[:2]] == [s.turns for s in ref.sessions]
    assert (tr.sessions[1].parent_turn, tr.sessions[1].join_turn) == (0, 1)
    with pytest.raises(InputError, match="unknown option"):
        read_trace(folder, tokenizer="x")


def test_read_records_routes_plain_records(tmp_path: Path) -> None:
    from agentbench.traces.readers import hf

    tr = hf.read_records(iter(MOONCAKE), source="rows")
    assert tr.n_requests() == 2 and tr.sessions[0].turns[0].block_size == 512
    with pytest.raises(InputError, match="no rows"):
        hf.read_records([], source="rows")


def test_a_hub_id_without_a_network_is_one_error_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """No name resolution: refused before ``load_dataset`` (whose retries take ~25 s)."""
    import socket

    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)  # a proxy leaves the name to the hub client
    asked: list[str] = []

    def no_dns(host: str, *args: object, **kwargs: object) -> None:
        asked.append(host)
        raise socket.gaierror(-2, "Name or service not known")

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("load_dataset called without a network")

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    monkeypatch.setattr(datasets, "load_dataset", never)
    with pytest.raises(InputError, match="cannot be resolved .*HF_HUB_OFFLINE=1") as e:
        read_trace("someone/nothing-here", format="hf")
    assert e.value.source == "someone/nothing-here"
    assert asked == ["huggingface.co"]
    # a host that resolves goes on to load_dataset (its own errors are its own)
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: [])
    with pytest.raises(InputError, match="load_dataset called without a network"):
        read_trace("someone/nothing-here", format="hf")


@pytest.mark.parametrize("env", [{"HTTPS_PROXY": "http://proxy.corp:3128"},
                                 {"https_proxy": "proxy.corp:3128"},
                                 {"ALL_PROXY": "socks5://proxy.corp:1080"}])
def test_a_hub_id_through_a_proxy_is_left_to_the_hub_client(
        monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    """A network whose names only its proxy resolves (``HTTPS_PROXY``, which the hub client
    follows): huggingface.co has no address here, yet the hub is reached. The hub id goes
    on to ``load_dataset`` (it was refused at once as without a network); ``NO_PROXY``
    naming the hub's host puts the check back."""
    import socket

    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY",
                 "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    def no_dns(host: str, *args: object, **kwargs: object) -> None:
        raise socket.gaierror(-2, "Name or service not known")

    def reached(*args: object, **kwargs: object) -> None:
        raise InputError("load_dataset called")

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    monkeypatch.setattr(datasets, "load_dataset", reached)
    with pytest.raises(InputError, match="load_dataset called"):
        read_trace("someone/nothing-here", format="hf")
    monkeypatch.setenv("NO_PROXY", "huggingface.co")
    with pytest.raises(InputError, match="cannot be resolved"):
        read_trace("someone/nothing-here", format="hf")
