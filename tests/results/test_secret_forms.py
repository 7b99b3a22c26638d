"""Secrets in the forms a URL or a scenario carries them: percent-encoded and ``+``-encoded
query values are redacted as written and as decoded, in run.json, both reports and the
terminal; ``${NAME}`` markers stay in run.json as markers (the name of the variable, never
its value), also in header values and under secret-looking ``extra_body`` keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_and_report, write_scenario

ENV = {"AB_H7_KEY": "SECRET-env-header-5151", "AB_H7_TOKEN": "SECRET-env-bearer-6262"}
#: written percent-encoded and with + for spaces; sent as written, decoded by the server
QUERY = "?api-key=sk%2DSECRET%2Dpct%2D7373&key=sk+SECRET+plus+8484"


def test_encoded_query_values_and_env_markers(fast_server: str, weka_dir: Path,
                                              tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:


    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    sc = write_scenario(tmp_path / "s.yaml", fast_server + QUERY, tmp_path / "res", weka_dir,
                        "limits: {max_requests: 4}\n")
    sc.write_text(sc.read_text().replace(
        "    ignore_eos: null\n",
        "    ignore_eos: null\n"
        "    headers: {X-Api-Key: '${AB_H7_KEY}', Authorization: 'Bearer ${AB_H7_TOKEN}',"
        " X-Mixed: 'literal-SECRET-part-${AB_H7_KEY}'}\n"
        "    extra_body: {api_token: '${AB_H7_KEY}', top_p: 0.9}\n"))
    run_dir = tmp_path / "res" / "r"
    files, output = run_and_report(sc, run_dir)
    assert {"report.html", "report.md", "run.json"} <= {f.name for f in files}
    for f in files:
        assert b"SECRET" not in f.read_bytes(), f.name
    assert "SECRET" not in output
    ep = json.loads((run_dir / "run.json").read_text())["scenario"]["endpoints"][0]
    assert ep["url"].endswith("?api-key=<redacted>&key=<redacted>"), ep["url"]
    # the markers say which variable held the value; literal text beside one does not stay
    assert ep["headers"]["X-Api-Key"] == "${AB_H7_KEY}"
    assert ep["headers"]["Authorization"] == "Bearer ${AB_H7_TOKEN}"
    assert ep["headers"]["X-Mixed"] == "<redacted>${AB_H7_KEY}"
    assert ep["extra_body"] == {"api_token": "${AB_H7_KEY}", "top_p": 0.9}


def test_every_form_of_a_query_value_is_a_secret() -> None:
    from agentbench.scenario.model import OpenAIEndpoint
    from agentbench.scenario.secrets import secrets_of

    cfg = OpenAIEndpoint.model_validate({"url": "http://h:1/v1" + QUERY, "model": "m"})
    found = set(secrets_of(cfg))
    for form in ("sk%2DSECRET%2Dpct%2D7373", "sk-SECRET-pct-7373", "sk%2dSECRET%2dpct%2d7373",
                 "sk+SECRET+plus+8484", "sk SECRET plus 8484", "sk%20SECRET%20plus%208484"):
        assert form in found, form


def test_env_markers_stay_in_run_json_and_their_values_do_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentbench.results.rundir import redacted_scenario, write_run_json
    from agentbench.scenario.model import Scenario
    from agentbench.scenario.secrets import secrets_of

    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    sc = Scenario.model_validate({
        "name": "m", "trace": {"kind": "synth", "profile": "codex", "sessions": 2},
        "load": {"kind": "lanes", "concurrency": 1}, "limits": {"max_requests": 1},
        "endpoints": [{"kind": "openai", "url": "http://h:1/v1", "model": "m",
                       "headers": {"X-Api-Key": "${AB_H7_KEY}", "X-Plain": "SECRET-plain",
                                   "Authorization": "Bearer ${AB_H7_TOKEN}",
                                   "User-Agent": "agent ${AB_H7_KEY}"},
                       "extra_body": {"api_token": "${AB_H7_KEY}", "auth": {"a": "${X}"},
                                      "tenant": "${AB_H7_TOKEN}"}}]})
    secrets = secrets_of(sc.endpoints[0])
    assert set(ENV.values()) <= set(secrets) and not any("${" in s for s in secrets)
    write_run_json(tmp_path, {"scenario": redacted_scenario(sc, secrets)}, secrets)
    text = (tmp_path / "run.json").read_text()
    assert "SECRET" not in text
    ep = json.loads(text)["scenario"]["endpoints"][0]
    assert ep["headers"] == {"X-Api-Key": "${AB_H7_KEY}", "X-Plain": "<redacted>",
                             "Authorization": "Bearer ${AB_H7_TOKEN}",
                             "User-Agent": "agent ${AB_H7_KEY}"}
    assert ep["extra_body"] == {"api_token": "${AB_H7_KEY}", "auth": "<redacted>",
                                "tenant": "${AB_H7_TOKEN}"}
