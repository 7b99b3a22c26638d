"""Synthetic-trace profiles: every generator parameter as data, each with its source.

A profile is one YAML file under ``profiles/``. Distributions are drawn with numpy;
each carries a ``source`` string that says where its numbers come from (a published
figure, a measurement of the shared Weka sample, or a calibration run), so the
generator code holds no workload numbers of its own.
"""

from __future__ import annotations

import functools
import math
from importlib import resources
from pathlib import Path
from statistics import NormalDist
from typing import Annotated, Any, Literal

import numpy as np
import numpy.typing as npt
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentbench.errors import InputError
from agentbench.traces import MAX_TOKENS
from agentbench.traces.smallfile import read_head

Z90 = NormalDist().inv_cdf(0.9)  # standard-normal quantile of p90: lognormal sigma from p50/p90


class Strict(BaseModel):
    # NaN and infinity draw nothing a trace can hold (NaN reached int() as a traceback)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class _DistBase(Strict):
    source: str = Field(description="Where the numbers come from (publication, measurement).")
    min: float | None = Field(None, description="Draws below are raised to this value.")
    max: float | None = Field(None, description="Draws above are lowered to this value.")

    def sample(self, rng: np.random.Generator, n: int) -> npt.NDArray[np.float64]:
        out = self._draw(rng, n)
        if self.min is not None or self.max is not None:
            np.clip(out, self.min, self.max, out=out)
        return out

    def _draw(self, rng: np.random.Generator, n: int) -> npt.NDArray[np.float64]:
        raise NotImplementedError


class LogNormal(_DistBase):
    """Lognormal given its median and either its p90 or its sigma (of the log)."""

    kind: Literal["lognormal"]
    median: float = Field(gt=0, description="Median of the draws.")
    p90: float | None = Field(None, gt=0, description="p90 of the draws (sets sigma).")
    sigma: float | None = Field(None, ge=0, description="Std of log(draw).")

    @model_validator(mode="after")
    def _one_spread(self) -> LogNormal:
        if (self.p90 is None) == (self.sigma is None):
            raise ValueError("give exactly one of p90 or sigma")
        if self.p90 is not None and self.p90 < self.median:
            raise ValueError("p90 must be at least the median")
        return self

    @property
    def log_sigma(self) -> float:
        """sigma = ln(p90 / median) / z_0.9 when given by p90."""
        if self.sigma is not None:
            return self.sigma
        assert self.p90 is not None
        return math.log(self.p90 / self.median) / Z90

    def _draw(self, rng: np.random.Generator, n: int) -> npt.NDArray[np.float64]:
        return rng.lognormal(math.log(self.median), self.log_sigma, n)


class Quantiles(_DistBase):
    """An empirical distribution given by quantiles (percent -> value, 0 and 100 included),
    drawn by inverse CDF, interpolating linearly (in log space when ``log``)."""

    kind: Literal["quantiles"]
    points: dict[float, float] = Field(description="Percentile (0..100) -> value.")
    log: bool = Field(False, description="Interpolate log(value) (heavy right tails).")

    @model_validator(mode="after")
    def _check(self) -> Quantiles:
        ps = sorted(self.points)
        if len(ps) < 2 or ps[0] != 0 or ps[-1] != 100:
            raise ValueError("points need percentiles 0 and 100")
        vals = [self.points[p] for p in ps]
        if any(b < a for a, b in zip(vals, vals[1:], strict=False)):
            raise ValueError("values must not decrease with the percentile")
        if self.log and vals[0] <= 0:
            raise ValueError("log interpolation needs positive values")
        return self

    def _draw(self, rng: np.random.Generator, n: int) -> npt.NDArray[np.float64]:
        ps, vs = _quantile_table(tuple(self.points.items()), self.log)
        u = rng.random(n) * 100.0
        if self.log:
            return np.exp(np.interp(u, ps, vs))
        return np.interp(u, ps, vs)


@functools.lru_cache(maxsize=256)
def _quantile_table(points: tuple[tuple[float, float], ...], log: bool
                    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(percentiles, values or their logs) of a Quantiles, sorted; made once per
    distribution (a synthesized trace draws from one thousands of times). Read-only."""
    ps = np.array(sorted(p for p, _ in points), dtype=np.float64)
    by = dict(points)
    vs = np.array([by[p] for p in sorted(by)], dtype=np.float64)
    if log:
        vs = np.log(vs)
    ps.flags.writeable = vs.flags.writeable = False
    return ps, vs


class Constant(_DistBase):
    kind: Literal["constant"]
    value: float

    def _draw(self, rng: np.random.Generator, n: int) -> npt.NDArray[np.float64]:
        return np.full(n, self.value, dtype=np.float64)


class Mixture(_DistBase):
    """Draws from one of several distributions, each with its share of the draws (e.g. the
    gap before a round: a tool's run most of the time, a person's reply sometimes)."""

    kind: Literal["mixture"]
    parts: list[MixturePart] = Field(min_length=1, description="The distributions.")

    @model_validator(mode="after")
    def _shares(self) -> Mixture:
        if abs(sum(p.share for p in self.parts) - 1.0) > 1e-6:
            raise ValueError("the parts' shares must add up to 1")
        return self

    def _draw(self, rng: np.random.Generator, n: int) -> npt.NDArray[np.float64]:
        which = rng.choice(len(self.parts), size=n, p=[p.share for p in self.parts])
        out = np.empty(n, dtype=np.float64)
        for i, part in enumerate(self.parts):
            at = np.flatnonzero(which == i)
            out[at] = part.dist.sample(rng, len(at))
        return out


class MixturePart(Strict):
    share: float = Field(gt=0, le=1, description="Share of the draws from ``dist``.")
    dist: Dist


Dist = Annotated[LogNormal | Quantiles | Constant | Mixture, Field(discriminator="kind")]
Mixture.model_rebuild()


class Value(Strict):
    """A scalar parameter and where it comes from."""

    value: Any
    source: str


class EndToStart(Strict):
    """Timing drawn as think time (before a turn) and API time (of a turn) separately."""

    kind: Literal["end_to_start"]
    think_s: Dist
    api_s: Dist


class StartToStart(Strict):
    """Timing drawn as the start-to-start gap between calls, split into the API time of the
    earlier call and the think (tool) time before the next one by ``api_share``."""

    kind: Literal["start_to_start"]
    gap_s: Dist
    api_share: Dist


Timing = Annotated[EndToStart | StartToStart, Field(discriminator="kind")]


class SessionShape(Strict):
    """How one session's turns are drawn.

    Context of turn 0 = system prefix + first message; turn k+1 re-sends turn k's
    context plus turn k's output plus new tool results.
    """

    turns: Dist
    system_prefix_tokens: Dist
    first_message_tokens: Dist
    output_tokens: Dist
    tool_result_tokens: Dist
    timing: Timing
    early: EarlyGrowth | None = Field(
        None, description="Other tool results for a session's first turns (an agent reads "
        "the code it will work on before it edits).")


class EarlyGrowth(Strict):
    """New tokens per turn for turns 1..``turns`` of a session, instead of
    ``tool_result_tokens``."""

    turns: Value
    tool_result_tokens: Dist

    @model_validator(mode="after")
    def _whole_turns(self) -> EarlyGrowth:
        v = self.turns.value
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"early turns must be a whole number >= 0, got {v!r}")
        return self


SessionShape.model_rebuild()


class Compaction(Strict):
    """Context compaction: when the next context would pass ``trigger_tokens`` it becomes the
    system prefix plus a summary (the prefix stays cached, the history is a new run)."""

    trigger_tokens: Value
    summary_tokens: Dist
    window_tokens: Value | None = Field(
        None, description="The model's context window. When set, no request's input plus "
        "output passes it: a first context above the trigger starts from a summary (a "
        "resumed conversation, compacted), and an output is cut at the window's edge.")

    @model_validator(mode="after")
    def _trigger_inside_window(self) -> Compaction:
        _number(self.trigger_tokens, "trigger_tokens", 0, MAX_TOKENS)
        if self.window_tokens is not None:
            _number(self.window_tokens, "window_tokens", 0, MAX_TOKENS)
        if self.window_tokens is not None and not (
                0 < float(self.trigger_tokens.value) < float(self.window_tokens.value)):
            raise ValueError("trigger_tokens must lie inside window_tokens")
        return self


class Children(Strict):
    """Subagents (spawns) or forks of root sessions."""

    share_of_roots: Value = Field(description="Share of roots that have at least one.")
    per_root: Dist = Field(description="How many a root with children has (rounded, >= 1).")
    same_launch_share: Value = Field(
        description="Chance that a child starts at the same parent turn as the previous one "
        "(parallel launches).")
    blocking_share: Value = Field(
        description="Share whose parent waits for them at the next turn (else background).")
    session: SessionShape
    siblings_share_prefix: Value = Field(
        description="Spawns of one root share one system prefix (same subagent prompt).")

    @model_validator(mode="after")
    def _shares(self) -> Children:
        for name in ("share_of_roots", "same_launch_share", "blocking_share"):
            _number(getattr(self, name), name, 0, 1)
        return self


def _number(v: Value, name: str, lo: int, hi: int) -> None:
    """A ``Value`` the generator takes as a number: one from ``lo`` to ``hi`` (a string,
    null or list was a traceback from ``float()`` in the generator)."""
    x = v.value
    if isinstance(x, bool) or not isinstance(x, int | float) or not lo <= x <= hi:
        raise ValueError(f"{name} must be a number from {lo} to {hi:,}, got {x!r}")


class Profile(Strict):
    name: str
    description: str
    published: str = Field(description="Key in agentbench/traces/published.yaml.")
    model: Value
    block_size: Value
    shared_prefix_across_sessions: Value
    root: SessionShape
    compaction: Compaction | None = None
    subagents: Children | None = None
    forks: Children | None = None

    @model_validator(mode="after")
    def _block_size(self) -> Profile:
        """A whole number of tokens from 1 to ``MAX_BLOCK_SIZE``, as a reader's option (0
        divided by zero, 1.5 was taken as 1)."""
        from agentbench.traces.readers._fields import check_block_size

        try:
            check_block_size(self.block_size.value)  # the readers' own check
        except InputError as e:
            raise ValueError(f"block_size: {e.message}") from None
        return self


#: the loader of the profiles shipped with agentbench (safe either way)
_SHIPPED_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def profile_names() -> list[str]:
    """Profiles shipped with agentbench."""
    folder = resources.files("agentbench.traces.synth") / "profiles"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


#: bytes at most in a profile file (a shipped one is a few KB)
MAX_PROFILE_BYTES = 1 << 20


def _profile_text(path: Path) -> str:
    """A user's profile file as text; one line naming it when it is not one (too large,
    unreadable, not UTF-8)."""
    try:
        # /dev/zero or a huge file is not read whole; a FIFO without a writer reads as empty
        raw = read_head(path, MAX_PROFILE_BYTES + 1)
    except OSError as e:
        raise InputError(f"cannot read profile ({e.strerror})", source=str(path)) from None
    if len(raw) > MAX_PROFILE_BYTES:
        raise InputError(f"larger than {MAX_PROFILE_BYTES:,} bytes; a profile is a short "
                         "YAML file", source=str(path))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"not a text (UTF-8) file: byte {e.start} cannot be decoded",
                         source=str(path)) from None


def load_profile(name_or_path: str | Path) -> Profile:
    """A shipped profile by name (``agentx``, ``codex``) or a profile YAML file."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.exists():
        text, source, loader = _profile_text(path), str(path), yaml.SafeLoader
    else:
        res = resources.files("agentbench.traces.synth") / "profiles" / f"{name_or_path}.yaml"
        if not res.is_file():
            raise InputError(f"unknown synth profile {str(name_or_path)!r} "
                             f"(known: {', '.join(profile_names())})", field="profile")
        text, source = res.read_text(), f"profiles/{name_or_path}.yaml"
        loader = _SHIPPED_LOADER
    try:
        # a shipped profile through libyaml when PyYAML has it (agentx's: 7.7 -> 1.0 ms,
        # a fixed cost of every synthesized trace); a user's file as any other YAML
        data = yaml.load(text, Loader=loader)  # a safe loader either way
        if data is None:  # an empty file (a FIFO with nothing writing reads as one)
            raise InputError("the profile is empty (a YAML mapping of the profile's fields)",
                             source=source)
        return Profile.model_validate(data)
    except RecursionError:  # PyYAML's composer recurses once a level
        raise InputError("not valid YAML (nested too deeply)", source=source) from None
    except yaml.YAMLError as e:
        # PyYAML's text spans lines ("... in <unicode string>, line 3"): one line here
        raise InputError(f"not valid YAML ({' '.join(str(e).split())})",
                         source=source) from None
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise InputError(err["msg"], source=source, where=where) from None


def published_targets(profile: Profile) -> dict[str, Any]:
    """The published figures this profile is calibrated against."""
    text = (resources.files("agentbench.traces") / "published.yaml").read_text()
    data: dict[str, Any] = yaml.safe_load(text)[profile.published]
    return data
