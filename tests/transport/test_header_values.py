"""A header that HTTP cannot send (a line break or NUL in its value, a name that is not a
token) is a one-line error naming the header, never its value: in the scenario, and in an
environment variable that only the request shows (``${NAME}``, ``api_key_env``). It used
to crash the run with aiohttp's traceback (a value), or fail every request (a name)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from agentbench.errors import InputError
from agentbench.replay import run_scenario
from agentbench.scenario.yamlfile import ScenarioError
from agentbench.testing.fakeserver import FakeServer, ServerConfig
from agentbench.traces.model import Session, Trace, Turn
from tests.helpers import openai_scenario


def _trace() -> Trace:
    ts = [Turn(turn=0, t=0.0, think_s=0.0, api_s=None, input_tokens=40, output_tokens=4,
               hash_ids=np.arange(1, 4, dtype=np.int64), block_size=16)]
    return Trace([Session("s", None, "root", None, None, None, "test", "x", 0.0, ts)])


_SCENARIO = """
name: h
endpoints:
  - kind: openai
    url: http://127.0.0.1:9
    model: m
    headers: {HEADERS}
trace: {kind: file, source: unused}
load: {kind: lanes, concurrency: 1}
limits: {max_requests: 1}
"""


@pytest.mark.parametrize("headers", ['{X-Api-Key: "HSECRET1\\nX-Other: 1"}',
                                     '{X-Api-Key: "HSECRET1\\r"}',
                                     '{X-Api-Key: "HSECRET1\\0"}',
                                     '{"X-Api-Key HSECRET1": v}',
                                     '{"": v}'])
def test_a_header_http_cannot_send_is_refused_in_the_scenario(headers) -> None:  # type: ignore[no-untyped-def]
    """One problem at the headers' line; a value is never shown (a name may be)."""
    from agentbench.scenario.loading import parse_scenario

    with pytest.raises(ScenarioError) as err:
        parse_scenario(_SCENARIO.replace("{HEADERS}", headers), "s.yaml")
    text = str(err.value)
    assert "s.yaml:line 7: endpoints.0.headers:" in text and "header" in text
    assert "\n" not in text.strip()
    if "v}" not in headers:
        assert "HSECRET1" not in text


def test_a_tab_and_non_ascii_stay_allowed() -> None:
    from agentbench.scenario.loading import parse_scenario

    sc = parse_scenario(_SCENARIO.replace("{HEADERS}", '{X-A: "a\\tb", X-B: "caf\u00e9"}'))
    assert sc.endpoints[0].headers == {"X-A": "a\tb", "X-B": "caf\u00e9"}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["api_key_env", "headers.X-Api-Key"])
async def test_a_line_break_in_an_environment_value_is_one_line(  # type: ignore[no-untyped-def]
        tmp_path, monkeypatch, where):
    """A key read from a file with CRLF line ends: a one-line error before anything runs,
    no run folder left, the key in no message."""
    monkeypatch.setenv("AB_HDR_KEY", "sk-HSECRET2\r\n")
    endpoint = ({"api_key_env": "AB_HDR_KEY"} if where == "api_key_env"
                else {"headers": {"X-Api-Key": "${AB_HDR_KEY}"}})
    srv = FakeServer(ServerConfig())
    await srv.start()
    try:
        with pytest.raises(InputError) as err:
            await asyncio.wait_for(run_scenario(
                openai_scenario(srv.url, tmp_path, endpoint=endpoint), trace=_trace(),
                progress=False), 50)
    finally:
        await srv.close()
    text = str(err.value)
    assert f"field '{where}'" in text and "control character" in text
    assert "HSECRET2" not in text and "\n" not in text
    assert not (tmp_path / "run").exists()
