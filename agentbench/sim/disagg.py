"""Prefill/decode disaggregation: a simulated endpoint split into a prefill pool and a
decode pool joined by a KV transfer link (docs/simulator.md, "Prefill/decode
disaggregation").

A request is routed to a prefill instance (its own router over that pool), where it is
admitted, matched against the prefix cache and the CPU and shared tiers, and prefilled as
on an aggregated instance, but reserves blocks for its prompt only and emits no token: at
the prefill's end its prompt's blocks stay in that instance's cache and it leaves
(``SimRequest.handoff``). The decode pool's router then picks a decode instance; the KV the
decode instance lacks moves over the link; the request joins that instance's queue when the
transfer ends, is admitted with nothing to prefill (``SimRequest.kv_ready``), and its first
token is the decode instance's first step with it, as with vLLM's disaggregated serving
(the prefill instance's token is discarded), so the client's TTFT holds the prefill queue,
the prefill, the exposed transfer and the decode queue.

The transfer (``transfer``):

    tokens    = prompt tokens - leading tokens the decode instance holds already
    wire_s    = tokens x kv_bytes_per_token / (bandwidth_gbps x 1e9 / 8)
    exposed_s = latency + wire_s                                   (overlap off)
              = latency + max(0, wire_s - prefill_s)               (overlap on)

where ``prefill_s`` is the request's time on its prefill instance from admission to the
prefill's end (the KV streams layer by layer while later layers compute). What the decode
instance holds is read when the transfer starts; it admits the request with what it holds
when the transfer ends (blocks evicted in between are not moved again: a simplification).
With ``decode_keeps_kv`` a decode instance's prefix cache keeps what it received, so a
session's next turn routed back to it (``session_affinity``, or ``cache_aware``: the most
leading blocks held) moves only the new tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentbench.scenario.endpoints import Disaggregation, KvLink
from agentbench.sim.engine import Instance, SimRequest
from agentbench.sim.presets import Preset
from agentbench.sim.router import Router


@dataclass(frozen=True)
class Transfer:
    """One KV transfer: ``tokens`` moved, their ``bytes``, the seconds on the wire and the
    seconds the request waits for it (``exposed_s``)."""

    tokens: int
    bytes: float
    wire_s: float
    exposed_s: float


def kv_bytes_per_token(link: KvLink, preset: Preset) -> float:
    """KV bytes one token moves: the link's figure, else the prefill preset's (a fitted
    preset has none: then the link must say)."""
    if link.kv_bytes_per_token is not None:
        return link.kv_bytes_per_token
    return preset.model_kv_bytes("disaggregation.link.kv_bytes_per_token")


def transfer(tokens: int, kvb: float, link: KvLink, prefill_s: float) -> Transfer:
    """The transfer of ``tokens`` tokens' KV (``kvb`` bytes each) after a prefill of
    ``prefill_s`` seconds (the module's formula)."""
    size = tokens * kvb
    wire = size / (link.bandwidth_gbps * 1e9 / 8)
    hidden = min(wire, max(0.0, prefill_s)) if link.overlap else 0.0
    return Transfer(tokens, size, wire, link.latency_s + (wire - hidden))


@dataclass
class PDStats:
    """What the link carried: transfers, tokens, bytes, seconds on the wire and seconds
    requests waited for it."""

    transfers: int = 0
    tokens: int = 0
    bytes: float = 0.0
    wire_s: float = 0.0
    exposed_s: float = 0.0


class PD:
    """The two pools of one endpoint: instances ``0 .. n_prefill - 1`` prefill, the rest
    decode; each pool with its router."""

    def __init__(self, cfg: Disaggregation, preset: Preset, block_size: int, seed: int,
                 max_imbalance: int) -> None:
        self.cfg = cfg
        self.n_prefill = cfg.prefill.instances
        self.n_decode = cfg.decode.instances
        self.block_size = block_size
        self.kvb = kv_bytes_per_token(cfg.link, preset)
        self.prefill_router = Router(cfg.prefill.router, self.n_prefill, max_imbalance, seed)
        self.decode_router = Router(cfg.decode.router, self.n_decode, max_imbalance, seed + 1)
        self.stats = PDStats()

    def route(self, req: SimRequest, instances: Sequence[Instance]) -> int:
        """The prefill instance for a new request (it becomes prefill only)."""
        req.handoff = True
        return self.prefill_router.choose(req, instances[:self.n_prefill])

    def hand_over(self, req: SimRequest, now: float,
                  instances: Sequence[Instance]) -> tuple[int, Transfer]:
        """A request whose prefill ended at ``now``: the decode instance it goes to and its
        transfer; the request is made ready for that instance (its arrival there is the
        transfer's end)."""
        decode = instances[self.n_prefill:]
        keeps = self.cfg.decode_keeps_kv
        if not keeps:
            req.match_limit = 0  # nothing received before is looked up
        prefill_s = now - req.admitted_at if req.admitted_at is not None else 0.0
        j = self.decode_router.choose(req, decode)
        held = decode[j].gpu.match(req.hashes, req.match_limit) if keeps else 0
        t = transfer(req.prompt_tokens - held * self.block_size, self.kvb, self.cfg.link,
                     prefill_s)
        req.prefill_start, req.prefill_end = req.admitted_at, now
        req.handoff, req.kv_ready = False, True
        req.instance, req.admitted_at, req.reserved, req.pinned = -1, None, 0, None
        req.computed = 0
        req.arrival = now + t.exposed_s
        return self.n_prefill + j, t

    def arrived(self, t: Transfer, decode: Instance) -> None:
        """Count a transfer that reached ``decode`` (one cut short by the client going
        away, or by the run's end, is not counted)."""
        ds = decode.stats
        ds.kv_in_tokens += t.tokens
        ds.kv_in_bytes += t.bytes
        ds.kv_in_wait_s += t.exposed_s
        st = self.stats
        st.transfers += 1
        st.tokens += t.tokens
        st.bytes += t.bytes
        st.wire_s += t.wire_s
        st.exposed_s += t.exposed_s
