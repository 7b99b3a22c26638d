"""``agentbench record``: the recording proxy (docs/record.md)."""

from __future__ import annotations

import re
from pathlib import Path

import typer

from agentbench.cli.app import app, guarded, path_value
from agentbench.errors import InputError

#: an HTTP header name (RFC 9110's token)
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


@app.command()
@guarded
def record(
    out: Path = typer.Option(..., "--output", "-o", help="Trace file to write (.parquet).",
                             parser=path_value),
    upstream: str | None = typer.Option(None, "--upstream",
                                        help="The OpenAI-compatible server to forward to."),
    listen: str = typer.Option("127.0.0.1:8080", "--listen", help="HOST:PORT to serve on."),
    keep_text: bool = typer.Option(False, "--keep-text",
                                   help="Also store prompt and response text."),
    subagents: str = typer.Option("infer", "--subagents",
                                  help="infer (from timing) or off (every session a root)."),
    session_header: str = typer.Option("X-Session-ID", "--session-header",
                                       help="Header naming a call's session."),
    no_user_sessions: bool = typer.Option(False, "--no-user-sessions",
                                          help="Do not group calls by the body's `user`."),
    rebuild: bool = typer.Option(False, "--rebuild",
                                 help="Remake -o from its journal instead of recording."),
) -> None:
    """Record a live agent through an OpenAI-compatible proxy into a native trace
    (docs/record.md)."""
    from agentbench.proxy.proxy import RecordConfig, parse_listen, run_record, summary
    from agentbench.proxy.upstream import check_upstream
    from agentbench.traces.output import check_file_name, check_folder, check_parquet_name

    check_file_name(out)
    if rebuild:
        from agentbench.proxy import rebuild as rebuild_trace

        rebuild_trace(out)
        typer.echo(summary(out))
        return
    check_parquet_name(out)  # a new recording (a rebuild keeps the name it was made with)
    check_folder(out)
    if upstream is None:
        raise InputError("--upstream is required (the server to forward to)", field="upstream")
    check_upstream(upstream)
    if not _HEADER_NAME.fullmatch(session_header):
        # a name with a space or a colon is no HTTP header name: no call would ever carry it
        raise InputError(f"not an HTTP header name: {session_header!r}",
                         field="session_header")
    if subagents not in ("infer", "off"):
        raise InputError(f"expected infer or off, got {subagents!r}", field="subagents")
    try:
        host, port = parse_listen(listen)
    except ValueError as e:
        raise InputError(str(e), field="listen") from None
    cfg = RecordConfig(upstream=upstream, out=out, host=host, port=port, keep_text=keep_text,
                       subagents=subagents, session_header=session_header,
                       session_from_user=not no_user_sessions)
    typer.echo(run_record(cfg, typer.echo))
