"""One trace replayed through each API against serve-sim (its own process, over HTTP):
responses and messages send the prompts chat sends, so every request has the same prompt
and cached tokens as under chat, read from where each API reports them; completions (token
ids) has the same prompt tokens."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from agentbench.cli import app
from tests.helpers import serve_sim

pytestmark = pytest.mark.timeout(240)


def _run(tmp_path: Path, api: str) -> pd.DataFrame:
    with serve_sim("--preset", "instant") as url:  # a fresh server: an empty cache
        sc = tmp_path / f"{api}.yaml"
        sc.write_text(f"""
name: apis
endpoints:
  - {{kind: openai, url: {url}, model: sim, api: {api}, ignore_eos: true}}
trace:
  kind: file
  source: builtin:claude-code-weka
  filters: {{sessions: [trace_0291, trace_0693]}}
load: {{kind: lanes, concurrency: 1}}
timing: {{time_scale: 0.0}}
limits: {{recycle: false}}
server_metrics: {{enabled: false}}
output: {{dir: {tmp_path / api}, run_id: r}}
""")
        res = CliRunner().invoke(app, ["run", str(sc), "--no-progress"])
        assert res.exit_code == 0, res.output
    df = pd.read_parquet(tmp_path / api / "r" / "requests.parquet")
    return df.sort_values(["session_id", "turn"]).reset_index(drop=True)


def test_every_api_sends_the_prompts_chat_sends(tmp_path: Path) -> None:
    chat = _run(tmp_path, "chat")
    assert len(chat) == 40 and (chat.status == "ok").all()
    assert (chat.prompt_tokens == chat.expected_input_tokens).all()
    assert chat.cached_tokens.sum() > 0.5 * chat.prompt_tokens.sum()  # the agents' reuse
    for api in ("responses", "messages", "completions"):
        got = _run(tmp_path, api)
        assert (got.status == "ok").all(), got.error_message.dropna().tolist()[:3]
        assert got.session_id.tolist() == chat.session_id.tolist()
        assert got.prompt_tokens.tolist() == chat.prompt_tokens.tolist(), api
        assert got.completion_tokens.tolist() == chat.completion_tokens.tolist(), api
        assert (got.token_events == got.completion_tokens).all(), api
        if api != "completions":  # completions has no chat template before the prompt
            assert got.cached_tokens.tolist() == chat.cached_tokens.tolist(), api
