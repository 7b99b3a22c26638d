"""Named trace sources, accepted wherever a trace path is (scenario ``trace.source``,
``agentbench traces stats``, ``read_trace``):

- ``builtin:NAME``: a trace shipped inside the package (``traces/builtin/``, native
  parquet, Apache-2.0 with its ``NOTICE``), listed with its facts in ``index.json``;
- ``cache:NAME[/SUBPATH]``: a public corpus that ``agentbench traces fetch NAME`` put in
  the user's cache (``fetch.py``).

``scripts/bundle_traces.py`` rebuilds the builtin files and their index from the originals.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentbench.errors import InputError

BUILTIN_DIR = Path(__file__).with_name("builtin")
PREFIXES = ("builtin:", "cache:")


def is_named(source: object) -> bool:
    """True for ``builtin:...`` and ``cache:...`` sources."""
    return isinstance(source, str) and source.startswith(PREFIXES)


def builtin_index() -> dict[str, dict[str, Any]]:
    """name -> {file, description, upstream, licence, facts...} of the bundled traces."""
    data: dict[str, dict[str, Any]] = json.loads((BUILTIN_DIR / "index.json").read_text())
    return data


def builtin_path(name: str) -> Path:
    index = builtin_index()
    if name not in index:
        raise InputError(f"no builtin trace {name!r} (bundled: "
                         f"{', '.join('builtin:' + n for n in index)})", source=f"builtin:{name}")
    return BUILTIN_DIR / index[name]["file"]


def resolve(source: str, format: str | None = None) -> tuple[str, str | None]:
    """(path, format) to read for ``source``: named sources become their file and reader;
    any other source comes back as given."""
    if source.startswith("builtin:"):
        if format not in (None, "native"):
            raise InputError(f"{source} is a native parquet trace; drop format {format!r}",
                             source=source, field="format")
        return str(builtin_path(source.removeprefix("builtin:"))), "native"
    if source.startswith("cache:"):
        from agentbench.traces.fetch import resolve_cache

        path, fmt = resolve_cache(source.removeprefix("cache:"))
        return str(path), format or fmt
    return source, format


def problem(source: str, format: str | None = None) -> str | None:
    """Why a named source cannot be read now (with ``format``; one line), or None."""
    try:
        resolve(source, format)
    except InputError as e:
        return e.message
    return None


def listing() -> dict[str, Any]:
    """The bundled traces with their facts and the fetchable corpora with their state:
    what ``agentbench traces list`` prints."""
    from agentbench.traces.fetch import corpus_dir, manifest, registry

    corpora = {}
    for name, c in registry().items():
        m = manifest(name)
        corpora[f"cache:{name}"] = {
            "description": c.description, "homepage": c.homepage, "licence": c.licence,
            "format": c.format, "fetched": m is not None,
            "fetched_at": m.get("fetched_at") if m else None, "dir": str(corpus_dir(name))}
    return {"builtin": {f"builtin:{k}": v for k, v in builtin_index().items()},
            "cache": corpora}


def format_listing(data: dict[str, Any]) -> str:
    """``listing()`` as two plain tables."""
    head = ("source", "sessions", "requests", "subagents", "input p50", "output p50",
            "potential hit")
    rows = [head]
    for name, e in data["builtin"].items():
        f = e["facts"]
        rows.append((name, f"{f['sessions']:,}", f"{f['requests']:,}", f"{f['spawns']:,}",
                     f"{f['input_tokens_p50']:,.0f}", f"{f['output_tokens_p50']:,.0f}",
                     f"{100 * f['potential_hit_rate']:.1f}%"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["Bundled traces (Apache-2.0; attribution in agentbench/traces/builtin/NOTICE):"]
    for r in rows:
        lines.append("  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                      for i, (c, w) in enumerate(zip(r, widths, strict=True))))
    for name, e in data["builtin"].items():
        lines.append(f"  {name}: {e['description']} ({e['upstream']})")
    lines.append("")
    lines.append("Corpora to fetch (`agentbench traces fetch NAME`, then cache:NAME):")
    for name, e in data["cache"].items():
        state = f"fetched {e['fetched_at']}" if e["fetched"] else "not fetched"
        lines.append(f"  {name} [{state}; {e['dir']}]: {e['description']}. {e['licence']}, "
                     f"{e['homepage']}")
    return "\n".join(lines)
