"""The presets a scenario's simulated endpoints name, checked before any run folder is
made: each one read (a shipped name or a preset file, ``presetfile``), and each suited to
what its endpoint asks of it (P/D pools, an NVMe tier); a problem is one ``InputError``
line naming the scenario and the key."""

from __future__ import annotations

from typing import Any

from agentbench.errors import InputError
from agentbench.scenario.endpoints import is_simulated


def check_presets(scenario: Any, source: str) -> None:
    """Read every preset the scenario's simulated endpoints name (their own, their P/D
    pools'), variants included, so a bad one (an unknown name, a broken file, a pool
    preset P/D cannot use, pools of different models) is one ``InputError`` line (naming
    ``source``, the scenario, and the key that named the preset) before any run folder
    is made."""
    from agentbench.scenario.loading import expand_variants

    for sc in expand_variants(scenario):
        for i, e in enumerate(sc.endpoints):
            if is_simulated(e):
                _check_endpoint(e, source, f"endpoints[{i}]")


def _check_endpoint(e: Any, source: str, where: str) -> None:
    from agentbench.sim.cluster import nvme_spec
    from agentbench.sim.disagg import kv_bytes_per_token
    from agentbench.sim.presets import get_preset

    d = e.disaggregation
    got = {}
    for role, key, ref, _ in e.pools():
        try:
            preset = got[role] = get_preset(ref)
            if (e.nvme_tier is not None or d is not None) and preset.scheduler != "paged":
                what = "disaggregation" if d is not None else "nvme_tier"
                raise InputError(f"preset {preset.name} is a {preset.scheduler} one; {what} "
                                 "needs paged (vLLM-like) presets")
            if e.nvme_tier is not None:
                nvme_spec(e, preset)
            if role == "prefill":
                kv_bytes_per_token(d.link, preset)
        except KeyError as err:
            raise InputError(str(err.args[0]), source=source, where=where,
                             field=key) from None
        except ValueError as err:
            raise InputError(str(err), source=source, where=where, field=key) from None
        except InputError as err:
            raise InputError(err.one_line(), source=source, where=where,
                             field=key) from None
    if d is not None:
        p, q = got["prefill"], got["decode"]
        if p.kv_bytes_per_token != q.kv_bytes_per_token:
            raise InputError(
                f"the prefill pool's preset {p.name} holds {p.kv_bytes_per_token:,} KV bytes "
                f"per token and the decode pool's {q.name} {q.kv_bytes_per_token:,}: both "
                "pools serve one model, so their presets must agree", source=source,
                where=where, field="disaggregation")
