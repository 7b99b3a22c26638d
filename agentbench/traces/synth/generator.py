"""The synthetic trace generator: agent sessions with real prefix structure.

Each session starts from a system+tools prefix and a first message; every later turn
re-sends the previous context plus the previous output plus new tool results, so a turn's
hash ids extend the previous turn's. Only whole blocks carry hash ids (the partial last
block is a unique tail, as in the Weka traces), so the block that straddles the old end of
context and the new content is a new block. Compaction replaces the history by a summary
after the (still cached) system prefix. The potential hit rate is whatever this structure
gives; nothing forces it.

Memory: every turn's ``hash_ids`` is a view ``buffer[:n_blocks]`` of one array per
session segment (a segment ends at a compaction), so a session costs its unique blocks.

Determinism: root session ``i`` draws from ``SeedSequence(seed).spawn(...)[i + 1]`` and
hash ids are numbered in generation order, so the same (profile, sessions, seed) gives an
equal trace, and a smaller ``sessions`` gives a prefix of a larger one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from agentbench.errors import InputError
from agentbench.traces import MAX_SYNTH_SESSIONS, MAX_TOKENS
from agentbench.traces.model import HashIds, Session, Trace, Turn
from agentbench.traces.synth.profile import (
    Children,
    Compaction,
    EndToStart,
    Profile,
    SessionShape,
    load_profile,
)

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


#: turns of a session, or children of a root, at most: a guard against a profile's typo
#: (TraceLab's longest session has 7,610 rounds), not a measured limit
MAX_COUNT = 1_000_000


class _Ids:
    """Hands out fresh hash ids, numbered in generation order."""

    def __init__(self) -> None:
        self.next = 0

    def take(self, k: int) -> IntArray:
        out = np.arange(self.next, self.next + k, dtype=np.int64)
        self.next += k
        return out


@dataclass
class _Prefix:
    """Leading tokens a session starts from and the hash ids of its whole blocks."""

    tokens: int
    ids: HashIds


@dataclass
class _Drawn:
    """One session's turns before timing is laid out."""

    inputs: IntArray
    outputs: IntArray
    hash_ids: list[HashIds]
    think: FloatArray
    api: FloatArray


def synthesize(profile: str | Profile, sessions: int, seed: int) -> Trace:
    """A trace of ``sessions`` root sessions (with their subagents/forks) drawn from
    ``profile`` (a shipped name such as ``agentx`` or ``codex``, a YAML path, or a Profile)."""
    check_sessions(sessions, field="sessions")
    if seed < 0:  # numpy's seeds are non-negative; the scenario's seed is too
        raise InputError(f"must be >= 0, got {seed}", field="seed")
    prof = profile if isinstance(profile, Profile) else load_profile(profile)
    bs = int(prof.block_size.value)
    ids = _Ids()
    seqs = np.random.SeedSequence(seed).spawn(sessions + 1)
    shared: _Prefix | None = None
    if prof.shared_prefix_across_sessions.value:
        rng0 = np.random.default_rng(seqs[0])
        shared = _new_prefix(prof.root, rng0, ids, bs)
    out: list[Session] = []
    source = f"synth:{prof.name}(seed={seed})"
    for i in range(sessions):
        rng = np.random.default_rng(seqs[i + 1])
        out.extend(_tree(prof, rng, f"{prof.name}-{i:06d}", ids, bs, shared, source))
    return Trace(out, name=f"synth-{prof.name}-n{sessions}-s{seed}")


def check_sessions(sessions: int, *, field: str) -> None:
    """Refuse a root-session count outside 0..``MAX_SYNTH_SESSIONS`` (one line naming
    ``field``, the flag or key it came from), before any is drawn: a typo's 10**20 would
    overflow numpy, 10**8 run for hours."""
    if not 0 <= sessions <= MAX_SYNTH_SESSIONS:
        shown = str(sessions) if abs(sessions) < 10**24 else "a number past 10**24"
        raise InputError(f"must be between 0 and {MAX_SYNTH_SESSIONS:,}, got {shown}",
                         field=field)


def _new_prefix(shape: SessionShape, rng: np.random.Generator, ids: _Ids, bs: int) -> _Prefix:
    tokens = int(_tokens(shape.system_prefix_tokens.sample(rng, 1), "a system prefix")[0])
    return _Prefix(tokens, ids.take(tokens // bs))


def _tokens(draws: FloatArray, what: str) -> IntArray:
    """Token counts drawn from a profile, each from 0 to ``MAX_TOKENS``, else one line: a
    user's profile with a count no request can have (1e300, a negative prefix) was a numpy
    traceback, petabytes of hash ids, or a trace written anyway."""
    if len(draws) and not (draws.min() >= 0 and draws.max() <= MAX_TOKENS):
        bad = draws.max() if draws.max() > MAX_TOKENS else draws.min()
        shown = f"{bad:,.0f}" if abs(bad) < 1e15 else f"{bad:.3g}"
        raise InputError(f"the profile drew {what} of {shown} tokens, outside the 0 to "
                         f"{MAX_TOKENS:,} a request may count", field="profile")
    return np.rint(draws).astype(np.int64)


def _count(dist_sample: FloatArray) -> int:
    """A count of turns or children, from 1 to ``MAX_COUNT``."""
    if not dist_sample[0] <= MAX_COUNT:  # drawing past it took minutes and gigabytes
        raise InputError(f"the profile drew a count of {dist_sample[0]:.3g} turns or "
                         f"children, over the {MAX_COUNT:,} a session may have",
                         field="profile")
    return max(1, int(np.rint(dist_sample[0])))


def _tree(prof: Profile, rng: np.random.Generator, root_id: str, ids: _Ids, bs: int,
          shared: _Prefix | None, source: str) -> list[Session]:
    """One root session with its children (root first, children in launch order)."""
    scope = "global" if shared is not None else root_id
    model = str(prof.model.value)
    n = _count(prof.root.turns.sample(rng, 1))
    prefix = shared if shared is not None else _new_prefix(prof.root, rng, ids, bs)
    root = _draw_session(prof.root, rng, n, prefix, prefix, prof.compaction, ids, bs)
    kids: list[tuple[str, Children, int, int | None, _Drawn]] = []
    for kind, spec in (("sub", prof.subagents), ("fork", prof.forks)):
        if spec is None or rng.random() >= float(spec.share_of_roots.value):
            continue
        m = _count(spec.per_root.sample(rng, 1))
        sib_prefix = _new_prefix(spec.session, rng, ids, bs) if (
            kind == "sub" and spec.siblings_share_prefix.value) else None
        pt = -1
        for _ in range(m):
            if pt < 0 or rng.random() >= float(spec.same_launch_share.value):
                pt = int(rng.integers(0, max(n - 1, 1)))
            blocking = n > 1 and rng.random() < float(spec.blocking_share.value)
            join = pt + 1 if blocking else None
            cn = _count(spec.session.turns.sample(rng, 1))
            if kind == "fork":  # inherits the parent's context after turn pt
                start = _Prefix(int(root.inputs[pt] + root.outputs[pt]), root.hash_ids[pt])
                keep = prefix
            else:
                keep = sib_prefix or _new_prefix(spec.session, rng, ids, bs)
                start = keep
            drawn = _draw_session(spec.session, rng, cn, start, keep, prof.compaction, ids, bs)
            kids.append((kind, spec, pt, join, drawn))
    # Root timeline: a turn that joins children waits for the last of them to end; its
    # think time then counts from the later of that and its previous response's end.
    t = np.zeros(n, dtype=np.float64)
    launch: dict[int, float] = {}
    for k in range(n):
        if k:
            ready = t[k - 1] + root.api[k - 1]
            for j, (_, _, _, join, d) in enumerate(kids):
                if join == k:
                    ready = max(ready, launch[j] + _duration(d))
            t[k] = ready + root.think[k]
        for j, (_, _, pt, _, _) in enumerate(kids):
            if pt == k:
                launch[j] = float(t[k] + root.api[k])
    out = [_session(root_id, None, "root", None, None, model, source, scope, 0.0, root, bs, t)]
    counters = {"sub": 0, "fork": 0}
    for j, (kind, _, pt, join, d) in enumerate(kids):
        counters[kind] += 1
        sid = f"{root_id}/{kind}{counters[kind]:03d}"
        rel = "spawn" if kind == "sub" else "fork"
        out.append(_session(sid, root_id, rel, pt, join, model, source, scope, float(launch[j]),
                            d, bs, _plain_times(d)))
    return out


def _draw_session(shape: SessionShape, rng: np.random.Generator, n: int, start: _Prefix,
                  keep: _Prefix, comp: Compaction | None, ids: _Ids, bs: int) -> _Drawn:
    """Token counts, hash ids and think/API times of one session of ``n`` turns.

    ``start`` is what turn 0 begins with (system prefix, or the parent's context for a
    fork); ``keep`` is what survives a compaction (the system prefix).
    """
    first = int(_tokens(shape.first_message_tokens.sample(rng, 1), "a first message")[0])
    outputs = _tokens(shape.output_tokens.sample(rng, n), "an output")
    tools = _tokens(shape.tool_result_tokens.sample(rng, max(n - 1, 0)), "a tool result")
    if shape.early is not None:
        m = min(int(shape.early.turns.value), n - 1)
        tools[:m] = _tokens(shape.early.tool_result_tokens.sample(rng, m), "a tool result")
    inputs = np.empty(n, dtype=np.int64)
    inputs[0] = start.tokens + first
    np.cumsum(outputs[:-1] + tools, out=inputs[1:])
    inputs[1:] += inputs[0]
    _tokens(inputs.astype(np.float64), "a prompt")  # before its hash ids are made
    seg_of = np.zeros(n, dtype=np.int64)
    seg_base = [start]
    if comp is not None and (comp.window_tokens is not None or (
            n > 1 and inputs.max() > float(comp.trigger_tokens.value))):
        seg_base = _compacted(comp, rng, inputs, outputs, tools, seg_of, start, keep)
    hash_ids: list[HashIds] = []
    blocks = inputs // bs
    for seg, base in enumerate(seg_base):
        idx = np.flatnonzero(seg_of == seg)
        need = int(blocks[idx].max()) - len(base.ids)
        buf = np.concatenate([base.ids, ids.take(need)])
        hash_ids.extend(buf[: blocks[k]] for k in idx)
    think, api = _times(shape, rng, n)
    return _Drawn(inputs, outputs, hash_ids, think, api)


def _compacted(comp: Compaction, rng: np.random.Generator, inputs: IntArray,
               outputs: IntArray, tools: IntArray, seg_of: IntArray, start: _Prefix,
               keep: _Prefix) -> list[_Prefix]:
    """Lay out contexts with compaction (in place) and return each segment's base: a later
    context that would pass the trigger becomes the kept prefix plus a summary. With
    ``comp.window_tokens`` also: a first context above the trigger starts so (a resumed
    conversation, compacted), a compacted context stays under the trigger, and an output
    is cut where input + output would pass the window."""
    trigger = float(comp.trigger_tokens.value)
    window = None if comp.window_tokens is None else int(comp.window_tokens.value)
    bases = [start]
    # as Python ints: a loop over numpy scalars costs several times more
    ins, outs, tls, segs = inputs.tolist(), outputs.tolist(), tools.tolist(), seg_of.tolist()
    for k in range(len(ins)):
        if k == 0:
            if window is None:
                continue
            nxt, seg = ins[0], 0
        else:
            nxt, seg = ins[k - 1] + outs[k - 1] + tls[k - 1], segs[k - 1]
        if nxt > trigger:
            nxt = keep.tokens + int(_tokens(comp.summary_tokens.sample(rng, 1), "a summary")[0])
            if window is not None:
                nxt = min(nxt, int(trigger))
            if k == 0:
                bases[0] = keep
            else:
                seg += 1
                bases.append(keep)
        ins[k] = nxt
        segs[k] = seg
        if window is not None:
            outs[k] = min(outs[k], window - nxt)
    inputs[:], outputs[:], seg_of[:] = ins, outs, segs
    return bases


def _times(shape: SessionShape, rng: np.random.Generator, n: int) -> tuple[FloatArray, FloatArray]:
    """(think_s, api_s) per turn; think_s[0] = 0 (a session starts with its request)."""
    timing = shape.timing
    if isinstance(timing, EndToStart):
        think = timing.think_s.sample(rng, n)
        api = timing.api_s.sample(rng, n)
    else:
        # gap k is start(k) -> start(k+1) = api(k) + think(k+1); the last gap sets the
        # last turn's API time only.
        gap = timing.gap_s.sample(rng, n)
        share = timing.api_share.sample(rng, n)
        api = gap * share
        think = np.empty(n, dtype=np.float64)
        think[1:] = gap[:-1] - api[:-1]
    think[0] = 0.0
    return think, api


def _plain_times(d: _Drawn) -> FloatArray:
    """Turn start times of a session nobody waits inside: start(k+1) = end(k) + think(k+1)."""
    t = np.zeros(len(d.inputs), dtype=np.float64)
    np.cumsum(d.api[:-1] + d.think[1:], out=t[1:])
    return t


def _duration(d: _Drawn) -> float:
    t = _plain_times(d)
    return float(t[-1] + d.api[-1])


def _turns(d: _Drawn, t: FloatArray, bs: int) -> list[Turn]:
    # ``tolist`` makes the Python numbers ``float(a[k])`` and ``int(a[k])`` would, at once
    cols = zip(t.tolist(), d.think.tolist(), d.api.tolist(), d.inputs.tolist(),
               d.outputs.tolist(), d.hash_ids, strict=True)
    # Turn's fields in order: turn, t, think_s, api_s, input_tokens, output_tokens,
    # hash_ids, block_size
    return [Turn(k, tk, th, ap, i, o, h, bs) for k, (tk, th, ap, i, o, h) in enumerate(cols)]


def _session(sid: str, parent: str | None, relation: str, pt: int | None, join: int | None,
             model: str, source: str, scope: str, start_s: float, d: _Drawn, bs: int,
             t: FloatArray) -> Session:
    return Session(session_id=sid, parent_id=parent, relation=relation,  # type: ignore[arg-type]
                   parent_turn=pt, join_turn=join, model=model, source=source, scope=scope,
                   start_s=start_s, turns=_turns(d, t, bs))
