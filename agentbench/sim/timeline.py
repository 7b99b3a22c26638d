"""Where a simulated request's time went, from the times the engine stamped on it
(docs/metrics.md, "Where time goes"): the parts sum to its time in the simulator, from
routing to its last token.

    queue        routed -> admitted on its (prefill) instance (a fitted preset's
                 request_s included)
    prefill      admitted -> prefill done, less its tier loads (steps shared with other
                 requests' chunks and decodes included)
    tier_load    its own loads from the CPU, NVMe and shared tiers, in the step that
                 admitted it
    transfer     P/D: prefill done -> its KV on the decode instance (the exposed part)
    decode_queue P/D: KV arrived -> admitted on the decode instance
    decode       first token -> last token; P/D: decode admission -> last token (the
                 first token's step included)
"""

from __future__ import annotations

from agentbench.sim.engine import SimRequest

#: the parts, in the order of ``agentbench.results.schema.BREAKDOWN``
PARTS = ("queue", "prefill", "tier_load", "transfer", "decode_queue", "decode")


def breakdown(req: SimRequest) -> tuple[float, ...] | None:
    """The seconds of each of ``PARTS`` for a finished request (None: it did not finish,
    or the engine did not stamp it)."""
    fin = req.finished_at
    if fin is None or req.aborted:
        return None
    if req.prefill_end is None:  # one instance did both
        start, first = req.admitted_at, req.first_token_at
        if start is None or first is None:
            return None
        return (start - req.sent_at, first - start - req.load_s, req.load_s, 0.0, 0.0,
                fin - first)
    start, end, dec = req.prefill_start, req.prefill_end, req.admitted_at
    if start is None or dec is None:
        return None
    return (start - req.sent_at, end - start - req.load_s, req.load_s, req.arrival - end,
            dec - req.arrival, fin - dec)
