"""Server-side routing of the simulated cluster: which instance a request goes to."""

from __future__ import annotations

import random
from collections.abc import Sequence

from agentbench.sim.engine import Instance, SimRequest


class Router:
    """Server-side routing across instances.

    round_robin: in turn; random: seeded uniform; least_loaded: fewest requests (waiting +
    running); session_affinity: a session sticks to the instance it first went to (chosen
    least loaded), requests without a session go round robin; cache_aware: the instance
    with the most leading blocks cached on GPU among those whose load is at most
    ``max_imbalance`` above the least loaded (ties: least loaded).
    """

    def __init__(self, policy: str, n: int, max_imbalance: int = 4, seed: int = 0) -> None:
        self.policy = policy
        self.n = n
        self.max_imbalance = max_imbalance
        self._rr = 0
        self._rng = random.Random(seed)
        self.sessions: dict[str, int] = {}

    def _round_robin(self) -> int:
        i = self._rr % self.n
        self._rr += 1
        return i

    def _least_loaded(self, instances: Sequence[Instance]) -> int:
        start = self._rr
        self._rr += 1
        return min(range(self.n), key=lambda i: (instances[i].load, (i - start) % self.n))

    def choose(self, req: SimRequest, instances: Sequence[Instance]) -> int:
        if self.n == 1:
            return 0
        p = self.policy
        if p == "round_robin":
            return self._round_robin()
        if p == "random":
            return self._rng.randrange(self.n)
        if p == "least_loaded":
            return self._least_loaded(instances)
        if p == "session_affinity":
            if req.session is None:
                return self._round_robin()
            got = self.sessions.get(req.session)
            if got is None:
                got = self.sessions[req.session] = self._least_loaded(instances)
            return got
        if p == "cache_aware":
            floor = min(i.load for i in instances) + self.max_imbalance
            best, best_key = 0, None
            for i, inst in enumerate(instances):
                if inst.load > floor:
                    continue
                key = (inst.gpu.match(req.hashes, req.match_limit), -inst.load)
                if best_key is None or key > best_key:
                    best, best_key = i, key
            return best
        raise ValueError(f"unknown router {p!r}")
