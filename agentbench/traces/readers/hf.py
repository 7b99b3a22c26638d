"""Hugging Face ``datasets``: a dataset saved with ``save_to_disk`` (``load_from_disk``),
a local data file or folder, or a hub id (``load_dataset``; needs a network or the local
hub cache). The rows go to the reader that ``detect_record_format`` picks from the first
row (or to ``record_format=``), through its ``read_records``.

Options: ``split`` (default ``train``, else the only / first split), ``name`` (dataset
config), ``record_format``; the rest go to the row reader (``tokenizer``, ``seed``, ...).
"""

from __future__ import annotations

import importlib
import socket
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from agentbench.errors import InputError
from agentbench.traces.model import Trace
from agentbench.traces.readers import READERS, detect_record_format

_DATA_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv",
                  ".arrow": "arrow"}


def read(source: str | Path, *, split: str | None = None, name: str | None = None,
         record_format: str | None = None, **options: Any) -> Trace:
    """Load ``source`` with ``datasets`` and hand its rows to the matching reader."""
    ds = load(source, split=split, name=name)
    return read_records(_rows(ds), source=str(source), record_format=record_format, **options)


def read_records(records: Iterable[dict[str, Any]], *, source: str,
                 record_format: str | None = None, **options: Any) -> Trace:
    """Route decoded records to the reader of their format (detected from the first)."""
    rows = iter(records)
    first = next(rows, None)
    if first is None:
        raise InputError("dataset has no rows", source=source)
    fmt = record_format or detect_record_format(first, source=source)
    if fmt in ("hf", "native") or fmt not in READERS:
        raise InputError(f"rows cannot be read as {fmt!r}", source=source,
                         field="record_format")

    def all_rows() -> Iterator[dict[str, Any]]:
        yield first
        yield from rows

    if fmt == "weka":  # one row per Weka document
        from agentbench.traces.readers import weka
        from agentbench.traces.readers._text import reject_unknown

        reject_unknown(options, "weka")
        sessions = []
        for i, doc in enumerate(all_rows()):
            try:
                sessions.extend(weka.read_document(doc, source=f"{source}[{i}]"))
            except InputError as e:
                raise e.located(source=source, where=f"row {i}") from None
        weka_trace = Trace(sessions, name=Path(source).name)
        weka_trace.validate()
        return weka_trace
    module = importlib.import_module(f"agentbench.traces.readers.{READERS[fmt]}")
    trace: Trace = module.read_records(all_rows(), source=source, **options)
    return trace


def load(source: str | Path, *, split: str | None = None, name: str | None = None) -> Any:
    """The ``datasets.Dataset`` of ``source`` (one split)."""
    import datasets

    path = Path(source)
    try:
        if path.is_dir() and ((path / "dataset_info.json").exists()
                              or (path / "dataset_dict.json").exists()
                              or (path / "state.json").exists()):
            ds = datasets.load_from_disk(str(path))
        elif path.is_file():
            builder = _DATA_BUILDERS.get(path.suffix)
            if builder is None:
                raise InputError(f"unknown data file type {path.suffix!r}", source=str(path))
            ds = datasets.load_dataset(builder, data_files=str(path), name=name)
        else:
            _hub_reachable(str(source))
            ds = datasets.load_dataset(str(source), name=name)
    except InputError:
        raise
    except FileNotFoundError as e:
        raise InputError(f"dataset not found ({e})", source=str(source)) from None
    except Exception as e:  # datasets raises many kinds (network, config, schema)
        raise InputError(f"cannot load dataset: {type(e).__name__}: {e}",
                         source=str(source)) from None
    if isinstance(ds, datasets.DatasetDict):
        if split is None:
            split = "train" if "train" in ds else next(iter(ds))
        if split not in ds:
            raise InputError(f"no split {split!r} (have {', '.join(ds)})", source=str(source),
                             field="split")
        return ds[split]
    return ds


def _hub_reachable(source: str) -> None:
    """Refuse a hub id at once when the hub's host has no address (no network, no DNS).

    ``huggingface_hub`` retries such a request five times with back-off (about 25 s and a
    dozen warning lines) before ``datasets`` gives up; offline mode (``HF_HUB_OFFLINE=1``,
    which reads the local hub cache) is left to the libraries.
    """
    from urllib.parse import urlsplit

    import huggingface_hub.constants as hub

    if hub.HF_HUB_OFFLINE:
        return
    url = urlsplit(hub.ENDPOINT)
    host = url.hostname or "huggingface.co"
    if _through_a_proxy(url.scheme or "https", host):
        return  # the proxy resolves the name: a host that has no address here is no sign
    try:
        socket.getaddrinfo(host, 443)
    except OSError as e:  # socket.gaierror: the name does not resolve
        raise InputError(f"not a local file or folder, and as a hub id it needs the network: "
                         f"{host} cannot be resolved ({e.strerror or e}); a dataset in the "
                         f"local hub cache reads with HF_HUB_OFFLINE=1",
                         source=source) from None


def _through_a_proxy(scheme: str, host: str) -> bool:
    """The hub client reaches ``host`` through a proxy of the environment (``HTTPS_PROXY``,
    ``ALL_PROXY``, ... not bypassed by ``NO_PROXY``), as httpx and requests read them: a
    network whose names only its proxy resolves (the hub was refused there at once)."""
    from urllib.request import getproxies_environment, proxy_bypass

    proxies = getproxies_environment()
    if not (proxies.get(scheme) or proxies.get("all")):
        return False
    return not proxy_bypass(host)  # NO_PROXY


def _rows(ds: Any) -> Iterator[dict[str, Any]]:
    for row in ds:
        yield dict(row)
