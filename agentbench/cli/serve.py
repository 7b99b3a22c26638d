"""``agentbench serve-sim``: the serving simulator as an OpenAI-compatible server."""

from __future__ import annotations

import typer

from agentbench.cli.app import app, guarded
from agentbench.errors import InputError


@app.command("serve-sim")
@guarded
def serve_sim(
    port: int = typer.Option(8000, "--port", help="Port to listen on."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind."),
    preset: str = typer.Option("h200-llama3-70b", "--preset",
                               help="Timing preset: a shipped name (--list-presets shows "
                               "them) or a preset YAML file (docs/engines.md)."),
    instances: int = typer.Option(1, "--instances", min=1, help="Instances behind the router."),
    router: str = typer.Option("round_robin", "--router", help="round_robin, session_affinity "
                               "(X-Session-ID header, else body `user`), least_loaded, "
                               "cache_aware or random."),
    speedup: float = typer.Option(1.0, "--speedup", help="Divide simulated durations by this."),
    max_context_tokens: int | None = typer.Option(
        None, "--max-context-tokens", help="Context window: a request whose prompt plus "
        "output passes it gets HTTP 400 with vLLM's 'maximum context length' message "
        "(default: the preset's, if it gives one, where only a prompt leaving no room for "
        "output is refused and a longer output is cut, as the engines do)."),
    block_size: int = typer.Option(16, "--block-size", help="KV block size in tokens."),
    cache_blocks: int | None = typer.Option(None, "--cache-blocks",
                                            help="GPU KV blocks per instance (default: preset)."),
    cpu_offload_blocks: int = typer.Option(0, "--cpu-offload-blocks",
                                           help="CPU offload tier blocks per instance."),
    shared_tier_blocks: int = typer.Option(0, "--shared-tier-blocks",
                                           help="Shared KV tier capacity in blocks (0: none)."),
    model: str = typer.Option("sim", "--model", help="Model name served."),
    list_presets: bool = typer.Option(False, "--list-presets", help="Print presets and exit."),
) -> None:
    """Run the KV-cache-aware serving simulator (OpenAI API under /v1) until Ctrl-C."""
    import asyncio

    from pydantic import ValidationError

    from agentbench.scenario.model import SimulatedEndpoint

    if list_presets:
        from agentbench.sim.presets import PRESETS

        typer.echo("\n\n".join(p.describe() for p in PRESETS.values()))
        return
    if not 0 <= port <= 65535:
        raise InputError(f"expected a port of 0-65535, got {port}", field="port")
    try:
        cfg = SimulatedEndpoint.model_validate({
            "kind": "simulated", "preset": preset, "instances": instances, "router": router,
            "speedup": speedup, "block_size": block_size, "cache_blocks": cache_blocks,
            "cpu_offload_blocks": cpu_offload_blocks, "model": model,
            "max_context_tokens": max_context_tokens,
            "shared_tier": {"capacity_blocks": shared_tier_blocks} if shared_tier_blocks
            else None})
    except ValidationError as e:
        raise InputError("; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}"
                                   for x in e.errors()), source="serve-sim options") from None
    from agentbench.sim.presets import get_preset

    try:  # a shipped name, or a preset file (relative to the working folder)
        get_preset(preset)
    except KeyError as e:
        raise InputError(str(e.args[0]), source="serve-sim options", field="preset") from None

    async def serve() -> None:
        from agentbench.sim import start_simulator

        handle = await start_simulator(cfg, host=host, port=port, in_process=True)
        typer.echo(f"serving simulator at {handle.url}/v1 ({instances} x {preset}, "
                   f"router {router}, speedup {speedup:g}); Ctrl-C stops it")
        try:
            await asyncio.Event().wait()
        finally:
            await handle.close()

    import contextlib

    with contextlib.suppress(KeyboardInterrupt):  # how it stops (as `record`): exit 0
        asyncio.run(serve())
