"""The report in a real browser: headless Chromium (Debian ``chromium``) opens report.html
over the DevTools protocol; the page loads with no console error or exception, every image
decodes, no script exists, and a screenshot is saved. Skipped only when chromium is absent.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentbench.report.render import render
from agentbench.testing.demo import write_demo_run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium not installed (Debian: apt-get install -y chromium)")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--remote-debugging-port=0", "--window-size=1200,2400"]
TIMEOUT_S = 60


class Page:
    """A minimal DevTools client: send commands, collect events."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.next_id = 0
        self.events: list[dict[str, Any]] = []
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.loaded = asyncio.Event()
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            if "id" in data and data["id"] in self.waiting:
                self.waiting.pop(data["id"]).set_result(data)
            elif "method" in data:
                self.events.append(data)
                if data["method"] == "Page.loadEventFired":
                    self.loaded.set()

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting[self.next_id] = fut
        await self.ws.send_json({"id": self.next_id, "method": method, "params": params})
        reply = await asyncio.wait_for(fut, TIMEOUT_S)
        assert "error" not in reply, reply
        return reply["result"]  # type: ignore[no-any-return]


async def _inspect(url: str, shot: Path) -> dict[str, Any]:
    profile = tempfile.mkdtemp(prefix="agentbench-chromium-")
    proc = await asyncio.create_subprocess_exec(
        CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    drain: asyncio.Task[None] | None = None
    try:
        assert proc.stderr is not None
        port = None
        while port is None:  # chromium announces its DevTools endpoint on stderr
            line = (await asyncio.wait_for(proc.stderr.readline(), TIMEOUT_S)).decode()
            if not line:
                raise RuntimeError(f"chromium exited ({await proc.wait()}) before DevTools")
            m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            port = int(m.group(1)) if m else None

        async def _drain() -> None:  # keep the pipe from filling up
            assert proc.stderr is not None
            while await proc.stderr.readline():
                pass

        drain = asyncio.create_task(_drain())
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/json/list") as r:
                targets = await r.json()
            ws_url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
            async with http.ws_connect(ws_url, max_msg_size=0) as ws:
                page = Page(ws)
                for domain in ("Page", "Runtime", "Log"):
                    await page.send(f"{domain}.enable")
                await page.send("Page.navigate", url=url)
                await asyncio.wait_for(page.loaded.wait(), TIMEOUT_S)
                images = (await page.send(
                    "Runtime.evaluate", returnByValue=True,
                    expression="Array.from(document.images).map(i => "
                               "[i.complete, i.naturalWidth, i.naturalHeight, i.alt])"))
                scripts = (await page.send("Runtime.evaluate", returnByValue=True,
                                           expression="document.scripts.length"))
                layout = (await page.send(
                    "Runtime.evaluate", returnByValue=True,
                    expression="[document.documentElement.scrollWidth, window.innerWidth, "
                               "Array.from(document.querySelectorAll('table')).slice(0, 1)"
                               ".map(t => Array.from(t.rows[0].cells).map(c => c.innerText))"
                               "[0] || [], Array.from(document.querySelectorAll('tr.key'))"
                               ".map(r => r.cells[0].innerText)]"))
                png = await page.send("Page.captureScreenshot", format="png",
                                      captureBeyondViewport=True)
                shot.write_bytes(base64.b64decode(png["data"]))
                page.reader.cancel()
                width, inner, header, key_rows = layout["result"]["value"]
                return {"events": page.events, "images": images["result"]["value"],
                        "scripts": scripts["result"]["value"], "overflow": width > inner,
                        "header": header, "key_rows": key_rows}
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        if drain is not None:
            drain.cancel()
        shutil.rmtree(profile, ignore_errors=True)


def _errors(events: list[dict[str, Any]]) -> list[Any]:
    """Exceptions, console.error/assert calls, and error-level log entries (failed loads)."""
    def bad(e: dict[str, Any]) -> bool:
        m, p = e["method"], e.get("params", {})
        return (m == "Runtime.exceptionThrown"
                or (m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"))
                or (m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error"))

    return [e for e in events if bad(e)]


@pytest.mark.timeout(180)
def test_report_renders_in_chromium(tmp_path: Path) -> None:
    cfg: dict[str, Any] = {"trees": 6, "turns": 12, "concurrency": (2, 6)}
    runs = [write_demo_run(tmp_path / f"r{i}", seed=i, hit=h, name=n, **cfg)
            for i, (h, n) in enumerate(((0.1, "kv-round-robin"), (0.9, "kv-shared-tier"),
                                        (0.95, "kv-affinity")))]
    for name, dirs in (("one", runs[:1]), ("three", runs)):
        html, _ = render(dirs, tmp_path / name)
        shot = tmp_path / f"{name}.png"
        res = asyncio.run(asyncio.wait_for(_inspect(html.resolve().as_uri(), shot),
                                           TIMEOUT_S * 2))
        assert _errors(res["events"]) == []
        assert res["scripts"] == 0
        imgs = res["images"]
        assert len(imgs) >= 8
        broken = [alt for complete, w, h, alt in imgs if not (complete and w > 100 and h > 100)]
        assert broken == []
        alts = {alt for _, _, _, alt in imgs}
        assert "AgentX: throughput per GPU vs interactivity" in alts
        assert any(a.startswith("swim lanes") for a in alts)
        # plots are drawn page-wide (legends beside them), and nothing overflows the page
        assert min(w for _, w, _, _ in imgs) >= 800  # was 576 px
        assert not res["overflow"]
        if name == "three":  # the comparison is headed by variant names, key rows marked
            assert res["header"] == ["metric", "round-robin", "shared-tier", "affinity",
                                     "shared-tier vs round-robin", "affinity vs round-robin"]
            assert {"throughput/GPU", "P50 TTFT", "hit rate", "achieved/potential",
                    "$/agent"} <= set(res["key_rows"])
            md = (tmp_path / name / "report.md").read_text()
            assert "&#x27;" not in md and "&quot;" not in md and "1.0x" not in md
        data = shot.read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 20_000


def test_broken_image_is_detected(tmp_path: Path) -> None:
    """The check above can fail: a page with a broken image and a console error."""
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><html><body><img alt="bad" src="data:image/png;base64,'
                    'AAAA"><img alt="missing" src="nothere.png">'
                    "<script>console.error('boom')</script></body></html>")
    res = asyncio.run(asyncio.wait_for(_inspect(page.as_uri(), tmp_path / "bad.png"),
                                       TIMEOUT_S * 2))
    assert _errors(res["events"])
    assert [w for _, w, _, _ in res["images"]] == [0, 0]


def test_a_comparison_s_title_names_what_its_labels_dropped(tmp_path: Path) -> None:
    """pd-ratio prints two comparisons, its codex runs and its agentx runs; the labels
    drop the name part the runs share ('pd-ratio-codex-'), so both pages were titled
    'agentbench: agg vs p2d6' and nothing at the top said which workload a page was. The
    title now names the shared part; the labels stay short."""
    runs = [write_demo_run(tmp_path / n, trees=2, turns=3, seed=i, name=f"pd-ratio-codex-{n}")
            for i, n in enumerate(("agg", "p2d6"))]
    html_path, md_path = render(runs, tmp_path / "out")
    html, md = html_path.read_text(), md_path.read_text()
    assert "<h1>agentbench: pd-ratio-codex: agg vs p2d6</h1>" in html
    assert md.startswith("# agentbench: pd-ratio-codex: agg vs p2d6\n")
    assert "<th>agg</th><th>p2d6</th>" in html


def test_one_run_s_headline_rows_are_grouped(tmp_path: Path) -> None:
    """The headline table listed the catalog's headline rows, then extras: P99 TTFT and
    P99 E2E sat after the error rate, a dozen rows from P50 TTFT, and the potential hit
    rate after P50 ITL. Rows are now grouped as the comparison's are: throughput,
    latency, cache, agents, cost, errors."""
    run = write_demo_run(tmp_path / "one", trees=2, turns=3, concurrency=(2, 4))
    _, md_path = render([run], tmp_path / "out")
    md = md_path.read_text()
    table = md.split("## Headline", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ", 1)[0].removeprefix("| ") for line in table.splitlines()
            if line.startswith("| ") and not line.startswith("| metric")]
    at = {r: i for i, r in enumerate(rows)}
    assert at["P90 TTFT"] == at["P50 TTFT"] + 1 and at["P99 TTFT"] == at["P90 TTFT"] + 1
    assert at["throughput"] < at["P50 TTFT"] < at["potential hit rate"] < at["hit rate"]
    assert at["hit rate"] < at["$/agent"] < at["error rate"] == len(rows) - 1
