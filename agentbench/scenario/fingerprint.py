"""What makes two runs comparable: a fingerprint of the workload and the way it was
replayed, recorded in ``run.json`` (``fingerprint``), and the check that refuses to
compare runs whose fingerprints differ beyond what the user allows.

Fields: ``trace`` (a hash of the trace's content: sessions, their relations, every turn's
token counts and hash ids; None when the run did not record it), ``filters`` and
``transform`` (the trace's, as configured), ``load`` (load and limits), ``timing``,
``time_base`` (``virtual`` or ``wall``) and ``endpoints`` (the endpoints' kinds, never
their URLs, names or secrets). What is *meant* to differ between a baseline and a
candidate (the engine, its flags, the router) is not in it."""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from agentbench.errors import InputError
from agentbench.traces.model import common_prefix

#: 2: the trace hash takes each turn's hash ids after those it shares with the session's
#: previous turn (1 took every turn's whole list); a trace hash is compared only between
#: fingerprints of one version (``fingerprint_differences``)
VERSION = 2
#: how the warning about trace hashes of two versions begins
VERSIONS_NOT_COMPARED = "trace: hashed by fingerprint version"
_VERSIONS_NOTE = (" (the hash changed in version 2): not checked; record the baseline again "
                  "to check it")
FIELDS = ("trace", "filters", "transform", "load", "timing", "time_base", "endpoints")
#: names accepted by ``--allow`` for a field
ALIASES = {"endpoint": "endpoints", "trace_hash": "trace", "transforms": "transform",
           "filter": "filters", "limits": "load", "clock": "time_base"}
_LIMIT_KEYS = ("duration_s", "max_sessions", "max_requests", "on_deadline", "recycle")


#: six int64 in the machine's byte order (numpy's int64)
_SIX = struct.Struct("=6q")
_NO_IDS = np.zeros(0, dtype=np.int64)


def trace_hash(trace: Any) -> str:
    """SHA-256 (first 16 hex digits) of a trace's content: per session its id, parent,
    relation, fork/join turns and turn count, and per turn its number, input and output
    token counts, block size, number of hash ids, how many leading ids it shares with the
    session's previous turn, and the ids after those. Times are left out (``timing`` says
    how they are used). No text is involved, and the cost is linear in the trace's
    *distinct* ids: an agent's turn re-sends its previous turn's context, and hashing every
    turn's whole list (fingerprint version 1) was 418 MB of SHA-256 for the AgentX trace
    of ``pd-ratio.yaml``. A trace's ``memo["hash"]``, when its owner keeps one (a trace it
    will not change), is taken as is."""
    memo = getattr(trace, "memo", None)
    if memo and "hash" in memo:
        return str(memo["hash"])
    h = hashlib.sha256()
    for s in sorted(trace.sessions, key=lambda s: s.session_id):
        h.update(json.dumps([s.session_id, s.parent_id, s.relation, s.parent_turn,
                             s.join_turn, len(s.turns)]).encode())
        prev, prev_at = _NO_IDS, -1
        for t in s.turns:
            ids = t.hash_ids
            if not (isinstance(ids, np.ndarray) and ids.dtype == np.int64):
                ids = np.asarray(ids).astype(np.int64)  # the values hashed, compared too
            at = _start_of(ids)
            if at == prev_at and at != -1:  # views from one address: a prefix, whole
                k = min(len(prev), len(ids))
            else:
                k = common_prefix(prev, ids) if len(prev) and len(ids) else 0
            # the bytes of np.array([...], dtype=np.int64), packed without the array
            h.update(_SIX.pack(t.turn, t.input_tokens, t.output_tokens, t.block_size,
                               len(ids), k))
            new = ids[k:]
            # its buffer: the bytes ``tobytes`` would copy out
            h.update(new.data if new.flags.c_contiguous else new.tobytes())
            prev, prev_at = ids, at
    return h.hexdigest()[:16]


def _start_of(ids: npt.NDArray[np.int64]) -> int:
    """The address of ``ids``' first element when the int64 array is contiguous (two such
    arrays from one address share their first ``min(len)`` ids: a session's turns are
    usually views of one buffer, ``agentbench.traces.model``), else -1."""
    return int(ids.ctypes.data) if ids.flags.c_contiguous else -1


def fingerprint(scenario: Mapping[str, Any], time_base: str,
                trace: Any = None) -> dict[str, Any]:
    """The fingerprint of a run of ``scenario`` (its JSON data, as in run.json) replayed
    in ``time_base``; ``trace`` (the loaded Trace) adds its content hash."""
    tr = scenario.get("trace") or {}
    limits = scenario.get("limits") or {}
    return {
        "version": VERSION,
        "trace": trace_hash(trace) if trace is not None else None,
        "filters": tr.get("filters"),
        "transform": tr.get("transform"),
        "load": {"load": scenario.get("load"),
                 "limits": {k: limits.get(k) for k in _LIMIT_KEYS}},
        "timing": scenario.get("timing"),
        "time_base": time_base,
        "endpoints": sorted(str(e.get("kind")) for e in scenario.get("endpoints") or []),
    }


def parse_allow(text: str | Sequence[str] | None, source: str = "--allow") -> set[str]:
    """``"endpoint,load"`` (or a list of names) → the fingerprint fields they name;
    ``all`` names every field. ``source`` names the option in errors (``--allow``, or
    the API's ``allow``)."""
    if text is None:
        return set()
    items = text.split(",") if isinstance(text, str) else list(text)
    out: set[str] = set()
    for raw in items:
        if not isinstance(raw, str):
            raise InputError(f"expected field names (strings), got {raw!r}"[:120],
                             source=source)
        name = raw.strip()
        if not name:
            continue
        if name == "all":
            out.update(FIELDS)
            continue
        name = ALIASES.get(name, name)
        if name not in FIELDS:
            raise InputError(f"unknown field {raw.strip()!r}; known: {', '.join(FIELDS)}",
                             source=source)
        out.add(name)
    return out


def versions_not_compared(warnings: Sequence[str]) -> list[str]:
    """Of ``fingerprint_differences``' warnings, the trace hashes not compared for their
    fingerprint versions, each as ``"1 in RUN and 2 in RUN"``."""
    return [w.removeprefix(VERSIONS_NOT_COMPARED + " ").removesuffix(_VERSIONS_NOTE)
            for w in warnings if w.startswith(VERSIONS_NOT_COMPARED)]


def _label(info: Mapping[str, Any], i: int) -> str:
    return str(info.get("run_id") or f"run {i + 1}")


def check_comparable(infos: Sequence[Mapping[str, Any]],
                     allow: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """Check that runs may be compared: each ``run.json`` mapping in ``infos`` (the first is
    the reference) must have the same fingerprint in every field but those in ``allow``
    (names from ``FIELDS``; aliases such as ``endpoint`` accepted).

    Raises ``InputError`` naming every differing field (and the runs) when they differ.
    Returns warnings: a run written before fingerprints existed, or a field one run did
    not record (e.g. the trace hash), is not refused; what could not be checked is said.
    """
    allowed = parse_allow(sorted(allow))
    warnings, _, every = fingerprint_differences(infos)
    differing = {name: pairs for name, pairs in every.items() if name not in allowed}
    if differing:
        parts = []
        for name, pairs in differing.items():
            by_ref: dict[str, list[str]] = {}
            for label, against in pairs:
                by_ref.setdefault(against, []).append(label)
            parts += [f"{name} ({', '.join(labels)} vs {against})"
                      for against, labels in by_ref.items()]
        raise InputError(f"runs are not comparable: {'; '.join(parts)} differ; allow "
                         f"with --allow {','.join(differing)}")
    return warnings


def fingerprint_differences(infos: Sequence[Mapping[str, Any]]
                            ) -> tuple[list[str], str, dict[str, list[tuple[str, str]]]]:
    """How the runs' fingerprints differ: (warnings for what could not be checked, the
    first run's label, each differing field -> (the run, the run it differs from)). Every
    run is compared with the first, except for the trace hash of another fingerprint
    version than the first's: hashes of two versions are never compared (a warning says
    so), and such a run's is compared with the first run of its own version."""
    warnings: list[str] = []
    prints: list[tuple[str, Mapping[str, Any]]] = []
    for i, info in enumerate(infos):
        fp = info.get("fingerprint")
        if isinstance(fp, Mapping):
            prints.append((_label(info, i), fp))
        else:
            warnings.append(f"{_label(info, i)}: no fingerprint in run.json (written before "
                            "fingerprints existed): comparability not checked")
    if len(prints) < 2:
        return warnings, prints[0][0] if prints else "", {}
    (ref_label, ref), rest = prints[0], prints[1:]
    #: per fingerprint version other than the first run's: its first run with a trace hash
    trace_refs: dict[str, tuple[str, Any]] = {}
    differing: dict[str, list[tuple[str, str]]] = {}
    for label, fp in rest:
        for name in FIELDS:
            a, b, against = ref.get(name), fp.get(name), ref_label
            if name == "trace" and _version(fp) != _version(ref):
                if a is not None and b is not None:
                    warnings.append(f"{VERSIONS_NOT_COMPARED} {_version(ref)} in {ref_label} "
                                    f"and {_version(fp)} in {label}{_VERSIONS_NOTE}")
                if b is None:
                    continue
                against, a = trace_refs.setdefault(_version(fp), (label, b))
                if against == label:
                    continue  # the first of its version
            if a is None or b is None:
                if a != b:
                    warnings.append(f"{name}: not recorded in "
                                    f"{against if a is None else label}: not checked")
                continue
            if _canon(a) != _canon(b):
                differing.setdefault(name, []).append((label, against))
    return warnings, ref_label, differing


#: the fingerprint fields that say which requests a run replays (its trace, as read,
#: filtered and transformed); the others say how it was served or paced
TRACE_FIELDS = ("trace", "filters", "transform")


def trace_groups(infos: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """The runs (indices into ``infos``, run.json mappings) grouped by the trace they
    replay (``TRACE_FIELDS`` and the fingerprint's version), in order of each group's
    first run. A run whose fingerprint does not say joins the first group: what it
    replays cannot be told apart."""
    keys: list[str | None] = []
    for info in infos:
        fp = info.get("fingerprint")
        keys.append(_canon([_version(fp), *(fp.get(f) for f in TRACE_FIELDS)])
                    if isinstance(fp, Mapping) and fp.get("trace") is not None else None)
    first = next((k for k in keys if k is not None), None)
    groups: dict[str | None, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(first if key is None else key, []).append(i)
    return list(groups.values())


def _version(fp: Mapping[str, Any]) -> str:
    """A fingerprint's version as text (``unknown`` when it has none)."""
    v = fp.get("version")
    return "unknown" if v is None else str(v)


def _canon(x: Any) -> str:
    return json.dumps(x, sort_keys=True, default=str)
