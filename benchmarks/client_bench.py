"""How much a load generator costs: agentbench's replay client next to AIPerf,
inference-perf and GuideLLM, against the same local servers, the client pinned to one core.

Servers (each in its own processes, pinned away from the client core):

- ``nginx``: ``../shared/tools/instant-server`` (Debian ``nginx-light``): the whole SSE
  answer in one write, as a file;
- ``chunked``: ``agentbench.testing.fastserver --per-event``: one write per SSE event, so
  every event can cost the client a read;
- ``timed``: fastserver with a known TTFT and ITL that logs when it wrote each stream's
  first token, for agentbench's TTFT self-inflation (measured TTFT minus the server's).

For each tool and server: requests/s and streamed tokens/s over the window in which the
server was serving (the longest stretch in which the server's threads kept switching or
using CPU, from ``/proc``), and
client CPU per request, in that window and all-in (the tool's process tree from start to
exit: start-up, dataset, records, result files). CPU is read from ``/proc`` every 50 ms
(user + system, children included) and from the tool's ``wait4`` rusage.

Peers are found in their own venvs (``~/.cache/agentbench/peers/{ip,gl}-venv``,
``~/.cache/agentbench/aiperf-venv``; override with ``--aiperf``/``--inference-perf``/
``--guidellm``) and skipped with a message when missing. Made with e.g.
``python3.12 -m venv ~/.cache/agentbench/peers/ip-venv && .../pip install inference-perf``.

Sections: ``peers`` (the table), ``long`` (32K-token prompts), ``scaling`` (1 vs 2 worker
processes), ``inflation`` (TTFT self-inflation), ``replay`` (lanes 1/64/256, schedule lag,
RSS at 1,000 x 142K, prompt build time). ``--quick`` shrinks the runs.

    .venv/bin/python benchmarks/client_bench.py [--quick] [--sections peers long scaling]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
INSTANT = ROOT.parent / "shared" / "tools" / "instant-server"
CACHE = Path.home() / ".cache" / "agentbench"
TOKENS = 128
MODEL = "tiny-llama"
SECTIONS = ("peers", "long", "scaling", "inflation", "capacity", "replay")
CLK = os.sysconf("SC_CLK_TCK")
STEP_S = 0.002  # the stepped server's decode step: one event per stream every 2 ms
GAP_S = 1.0  # server wake-ups further apart than this are not one stretch of load
CPUS = sorted(os.sched_getaffinity(0))  # read once: main() moves itself to the server cores


# ---------------------------------------------------------------- cores and /proc


def cores() -> tuple[list[int], list[int]]:
    """(client cores, server cores): the last CPU for the client, the rest for servers."""
    cpus = CPUS
    if len(cpus) == 1:
        return cpus, cpus
    return cpus[-1:], cpus[:-1]


def pin(cpus: list[int]) -> list[str]:
    return ["taskset", "-c", ",".join(map(str, cpus))] if shutil.which("taskset") else []


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds incl. reaped children) of one process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(rest[1]), sum(int(x) for x in rest[11:15]) / CLK


def tree(root: int) -> list[int]:
    """``root`` and its live descendants."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = _stat(int(d))
            if st is not None:
                kids.setdefault(st[0], []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def activity(pids: list[int]) -> tuple[int, float]:
    """(context switches of the processes' threads, their CPU seconds). An idle server
    sleeps in epoll_wait: it neither switches nor uses CPU. A lightly loaded one wakes per
    request (switches); a saturated one never sleeps but its CPU time grows. Socket reads
    do not show in /proc/<pid>/io, so these two are the signs of serving."""
    n, cpu = 0, 0.0
    for p in pids:
        st = _stat(p)
        if st is not None:
            cpu += st[1]
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/status") as f:
                    for line in f:
                        if "ctxt_switches" in line:
                            n += int(line.split()[1])
            except OSError:
                pass
    return n, cpu


class Sampler(threading.Thread):
    """Every ``period`` s: (time, client-tree CPU s, server activity)."""

    def __init__(self, client: int, server: list[int], period: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.client, self.server, self.period = client, server, period
        self.samples: list[tuple[float, float, tuple[int, float]]] = []
        self.stop = threading.Event()
        self._pids = [client]

    def run(self) -> None:
        k = 0
        while not self.stop.is_set():
            if k % 10 == 0:
                self._pids = tree(self.client)
            self.samples.append((time.perf_counter(), self.tree_cpu(self._pids),
                                 activity(self.server)))
            k += 1
            self.stop.wait(self.period)

    @staticmethod
    def tree_cpu(pids: list[int]) -> float:
        """CPU seconds of a process tree, each live process read now, children first.

        Summed afresh every sample: a process that ended is no longer counted itself, as
        its CPU moved into its parent's ``cutime`` when it was reaped (keeping its last
        reading, as this sampler once did for processes that left the tree between two
        refreshes of the pid list, counted it twice). Parents are read before their
        children (``tree`` lists them so), so that a child reaped between the two readings
        is counted in neither rather than in both (an under-count of one sample, gone at
        the next)."""
        return sum(st[1] for st in map(_stat, pids) if st is not None)

    def window(self) -> tuple[float, float] | None:
        """(seconds the server was under load, client CPU s in that time). Under load the
        server is active (switches or CPU ticks) in nearly every sample; a start-up probe,
        a health check or a metrics scrape is a short burst apart from it. Active samples
        are grouped into runs no more than ``GAP_S`` apart, and the window is the longest."""
        s = self.samples
        busy = [i for i in range(1, len(s)) if s[i][2] != s[i - 1][2]]
        if not busy:
            return None
        groups: list[list[int]] = [[busy[0]]]
        for i in busy[1:]:
            if s[i][0] - s[groups[-1][-1]][0] > GAP_S:
                groups.append([])
            groups[-1].append(i)
        g = max(groups, key=lambda g: s[g[-1]][0] - s[g[0] - 1][0])
        a, b = g[0] - 1, g[-1]
        return s[b][0] - s[a][0], max(0.0, s[b][1] - s[a][1])


def measure(cmd: list[str], server: Server, env: dict[str, str] | None = None,
            timeout: float = 900, log: Path | None = None) -> dict[str, Any]:
    """Run a client command pinned to the client core; its window and CPU."""
    out = log.open("w") if log else subprocess.DEVNULL
    t0 = time.perf_counter()
    proc = subprocess.Popen(pin(cores()[0]) + cmd, stdout=out, stderr=subprocess.STDOUT,
                            env=env, cwd=ROOT)
    sampler = Sampler(proc.pid, server.pids())
    sampler.start()
    deadline = time.monotonic() + timeout
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
            pid, status, ru = os.wait4(proc.pid, 0)
            break
        time.sleep(0.02)
    proc.returncode = os.waitstatus_to_exitcode(status)
    sampler.stop.set()
    sampler.join()
    if log:
        out.close()  # type: ignore[union-attr]
    win = sampler.window()
    child: dict[str, Any] = {}
    if log:  # the raw samples, to check the window by eye
        log.with_suffix(".samples.json").write_text(json.dumps(sampler.samples))
        lines = log.read_text(errors="replace").strip().splitlines()
        if lines and lines[-1].startswith("{"):  # agentbench's child: its own figures
            with contextlib.suppress(ValueError):
                child = json.loads(lines[-1])
    return {"rc": proc.returncode, "wall_s": time.perf_counter() - t0,
            "cpu_all_s": ru.ru_utime + ru.ru_stime,
            "window_s": win[0] if win else None, "cpu_window_s": win[1] if win else None,
            "reads_per_request": child.get("reads_per_request"), "child": child}


# ---------------------------------------------------------------- servers


class Server:
    """A local server in its own processes, pinned to the server cores."""

    def __init__(self, kind: str, ttft: float = 0.0, itl: float = 0.0,
                 fixed_tokens: bool = True) -> None:
        self.kind = kind
        self.proc: subprocess.Popen[str] | None = None
        self.tmp = tempfile.mkdtemp(prefix="ab-bench-srv-")
        os.chmod(self.tmp, 0o755)  # nginx workers run as another user
        self.log = Path(self.tmp) / "streams.log"
        self.master = 0
        if kind == "nginx":
            port = 18900 + os.getpid() % 500
            out = subprocess.run(pin(cores()[1]) + [str(INSTANT), "start", "--port", str(port),
                                                    "--tokens", str(TOKENS), "--dir", self.tmp],
                                 check=True, capture_output=True, text=True)
            self.master = int(out.stdout.split()[-1])
            self.url = f"http://127.0.0.1:{port}"
        else:
            cmd = [sys.executable, "-m", "agentbench.testing.fastserver", "--port", "0"]
            if fixed_tokens:  # else each request's max_tokens
                cmd += ["--tokens", str(TOKENS)]
            if kind in ("chunked", "stepped"):
                cmd.append("--per-event")
            if kind == "stepped":
                cmd += ["--step", str(STEP_S)]
            if kind == "timed":
                cmd += ["--ttft", str(ttft), "--itl", str(itl), "--log", str(self.log)]
            self.proc = subprocess.Popen(pin(cores()[1]) + cmd, stdout=subprocess.PIPE,
                                         text=True, cwd=ROOT)
            assert self.proc.stdout is not None
            line = self.proc.stdout.readline()
            self.master = self.proc.pid
            self.url = f"http://127.0.0.1:{int(line.split()[1])}"

    def pids(self) -> list[int]:
        return tree(self.master)

    def stop(self) -> None:
        if self.kind == "nginx":
            subprocess.run([str(INSTANT), "stop", "--dir", self.tmp], capture_output=True)
        elif self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
        shutil.rmtree(self.tmp, ignore_errors=True)


# ---------------------------------------------------------------- tools


def agentbench_cmd(url: str, n: int, conc: int, context: int, workers: int, out: Path,
                   think: float = 0.0, turns: int = 16, vary: bool = False) -> list[str]:
    """One agentbench run in a child process; ``turns`` per tree (1: every prompt new);
    ``vary``: output lengths drawn from 64-192 tokens (mean 128) instead of all 128."""
    return [sys.executable, __file__, "--child", "run", url, str(conc), str(n), str(context),
            str(think), str(out), str(workers), str(turns), str(int(vary))]


def agentbench_count(out: Path) -> tuple[int, dict[str, Any]]:
    import pyarrow.parquet as pq

    run_dir = next(p for p in out.iterdir() if (p / "requests.parquet").exists())
    t = pq.read_table(run_dir / "requests.parquet", columns=["status"]).to_pandas()
    return int((t.status == "ok").sum()), json.loads((run_dir / "run.json").read_text())


def hf_tokenizer(work: Path) -> tuple[str, Path]:
    """The tiny model's tokenizer as a cached hub repo (AIPerf resolves it offline)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from peer_compare import cached_tokenizer, tokenizer_dir

    return cached_tokenizer(work / "hf-home"), tokenizer_dir()


def run_aiperf(exe: Path, url: str, n: int, conc: int, context: int, work: Path,
               server: Server) -> dict[str, Any]:
    repo, _ = hf_tokenizer(work)
    art = work / "aiperf"
    cmd = [str(exe), "profile", "-m", MODEL, "--url", url, "--endpoint-type", "chat",
           "--streaming", "--concurrency", str(conc), "--request-count", str(n),
           "--synthetic-input-tokens-mean", str(context), "--synthetic-input-tokens-stddev",
           "0", "--output-tokens-mean", str(TOKENS), "--extra-inputs", "ignore_eos:true",
           "--tokenizer", repo, "--artifact-dir", str(art), "--ui-type", "none",
           "--random-seed", "0"]
    env = {**os.environ, "HF_HOME": str(work / "hf-home"), "HF_HUB_OFFLINE": "1"}
    r = measure(cmd, server, env, log=work / "aiperf.log")
    try:
        data = json.loads(next(art.rglob("profile_export_aiperf.json")).read_text())
        v = data["request_count"]
        r["ok"] = int(v["avg"] if isinstance(v, dict) else v)
    except (StopIteration, KeyError, ValueError):
        r["ok"] = None
    return r


def run_guidellm(exe: Path, url: str, n: int, conc: int, context: int, work: Path,
                 server: Server) -> dict[str, Any]:
    _, tok = hf_tokenizer(work)
    out = work / "guidellm.json"
    cmd = [str(exe), "run", "--backend", f"kind=openai_http,target={url},model={MODEL}",
           "--profile", f"kind=concurrent,streams={conc}",
           "--constraint", f"kind=max_requests,count={n}",
           "--data", f"kind=synthetic_text,prompt_tokens={context},output_tokens={TOKENS}",
           "--tokenizer", f"kind=hf_auto,model={tok}",
           "--output", f"kind=json,path={out}", "--disable-console-interactive"]
    r = measure(cmd, server, log=work / "guidellm.log")
    try:
        data = json.loads(out.read_text())
        b = data["benchmarks"][0]
        totals = b["metrics"]["request_totals"] if "metrics" in b else b["request_totals"]
        r["ok"] = int(totals["successful"])
    except (OSError, KeyError, ValueError, IndexError, TypeError):
        r["ok"] = None
    return r


def run_inference_perf(exe: Path, url: str, n: int, conc: int, context: int, work: Path,
                       server: Server) -> dict[str, Any]:
    _, tok = hf_tokenizer(work)
    report = work / "ip-reports"
    cfg = work / "ip.yaml"
    # concurrency-bound load: n requests over `conc` workers; streamed text completions
    # (its random-data generator makes completions requests only)
    cfg.write_text(f"""
load:
  type: concurrent
  stages:
  - num_requests: {n}
    concurrency_level: {conc}
api:
  type: completion
  streaming: true
server:
  type: vllm
  model_name: {MODEL}
  base_url: {url}
  ignore_eos: true
tokenizer:
  pretrained_model_name_or_path: {tok}
data:
  type: random
  input_distribution: {{min: {context}, max: {context}, mean: {context}, std_dev: 0,
                        total_count: {n}}}
  output_distribution: {{min: {TOKENS}, max: {TOKENS}, mean: {TOKENS}, std_dev: 0,
                         total_count: {n}}}
report:
  request_lifecycle: {{summary: true, per_stage: true, per_request: false}}
storage:
  local_storage: {{path: {report}}}
""")
    r = measure([str(exe), "--config_file", str(cfg)], server, log=work / "ip.log")
    r["ok"] = None
    for f in report.rglob("*summary*.json") if report.exists() else []:
        try:
            data = json.loads(f.read_text())
            r["ok"] = int(data["successes"]["count"])
            break
        except (KeyError, ValueError, TypeError):
            continue
    return r


def peer_exes(args: argparse.Namespace) -> dict[str, Path]:
    return {"aiperf": args.aiperf, "inference-perf": args.inference_perf,
            "guidellm": args.guidellm}


def floor_exe(work: Path) -> Path | None:
    """``floor_client.c`` built with the C compiler (None, with a message, without one):
    the least a client that stamps every read can cost on this machine."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        print("[skip] floor: no C compiler", file=sys.stderr)
        return None
    exe = work / "floor_client"
    if not exe.exists():
        subprocess.run([cc, "-O2", "-o", str(exe), str(ROOT / "benchmarks" / "floor_client.c")],
                       check=True)
    return exe


def run_floor(exe: Path, url: str, n: int, conc: int, context: int, work: Path,
              server: Server) -> dict[str, Any]:
    """The floor client: as many requests and connections, a prompt of ~4 bytes a token."""
    port = url.rsplit(":", 1)[1]
    r = measure([str(exe), port, str(conc), str(n), str(4 * context)], server,
                log=work / "log")
    lines = (work / "log").read_text(errors="replace").strip().splitlines()
    if lines and lines[-1].startswith("{"):
        r["reads_per_request"] = json.loads(lines[-1])["reads_per_request"]
    return r


# ---------------------------------------------------------------- sections


def _row(tool: str, server: str, n: int, r: dict[str, Any]) -> dict[str, Any]:
    ok = r.get("ok")
    done = ok if ok is not None else n
    win = r.get("window_s")
    return {"tool": tool, "server": server, "requests": done, "ok_known": ok is not None,
            "req_s": done / win if win else None,
            "tok_s": done * TOKENS / win if win else None,
            "cpu_ms_window": r["cpu_window_s"] / done * 1e3 if win and done else None,
            "cpu_ms_all": r["cpu_all_s"] / done * 1e3 if done else None,
            "reads": r.get("reads_per_request"), "rc": r["rc"]}


def print_rows(rows: list[dict[str, Any]]) -> None:
    print(f"{'tool':<22}{'server':<9}{'requests':>9}{'req/s':>9}{'tokens/s':>11}"
          f"{'CPU ms/req window':>19}{'all-in':>9}{'reads/req':>10}")

    def f(v: float | None, fmt: str) -> str:
        return format(v, fmt) if v is not None else "-"

    for r in rows:
        print(f"{r['tool']:<22}{r['server']:<9}{r['requests']:>9,}"
              f"{'' if r['ok_known'] else '~'}{f(r['req_s'], ',.0f'):>8}"
              f"{f(r['tok_s'], ',.0f'):>11}{f(r['cpu_ms_window'], '.2f'):>19}"
              f"{f(r['cpu_ms_all'], '.2f'):>9}{f(r.get('reads'), '.1f'):>10}"
              + (f"  (exit {r['rc']})" if r["rc"] else ""))
    sys.stdout.flush()


def best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Best of repeats (lowest all-in CPU per request), with the median kept beside it."""
    ok = [r for r in runs if r["cpu_ms_all"] is not None] or runs
    b = dict(min(ok, key=lambda r: r["cpu_ms_all"] or 1e9))
    for k in ("req_s", "cpu_ms_window", "cpu_ms_all"):
        vals = [r[k] for r in ok if r[k] is not None]
        b[k + "_median"] = statistics.median(vals) if vals else None
    return b


def loops() -> list[str]:
    """The event loops agentbench is measured on: asyncio's, and uvloop when installed."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return ["asyncio"]
    return ["asyncio", "uvloop"]


def loop_env(loop: str, tree: Path | None = None) -> dict[str, str]:
    """The child's environment: its event loop, and ``tree`` (another checkout's
    ``agentbench`` package, e.g. ``git archive``d, for a before/after in one run)."""
    env = {**os.environ, "AB_BENCH_LOOP": loop}
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    return env


def variants(args: argparse.Namespace) -> list[tuple[str, str, Path | None]]:
    """(row name, loop, tree) of each agentbench variant measured."""
    out: list[tuple[str, str, Path | None]] = []
    for loop in loops():
        if args.before is not None:
            out.append((f"before {loop}", loop, args.before))
        out.append((f"agentbench {loop}", loop, None))
    return out


def section_peers(args: argparse.Namespace, n: int, work: Path) -> list[dict[str, Any]]:
    rows = []
    for kind in [k for k in ("nginx", "chunked", "stepped") if k in args.servers]:
        srv = Server(kind)
        try:
            for tool in ("agentbench", "floor", "aiperf", "inference-perf", "guidellm"):
                exe = floor_exe(work) if tool == "floor" else peer_exes(args).get(tool)
                if tool == "floor" and exe is None:
                    continue
                if tool != "agentbench" and (exe is None or not Path(exe).is_file()):
                    print(f"[skip] {tool}: not installed at {exe}", file=sys.stderr)
                    continue
                todo = variants(args) if tool == "agentbench" else \
                    [("floor (C)" if tool == "floor" else tool, "", None)]
                for name, loop, tree_dir in todo:
                    runs = []
                    for rep in range(args.repeat if tool in ("agentbench", "floor") else 1):
                        d = work / f"{name.replace(' ', '-')}-{kind}-{rep}"
                        d.mkdir(parents=True)
                        if tool == "agentbench":
                            r = measure(agentbench_cmd(srv.url, n, args.concurrency,
                                                       args.context, 1, d), srv,
                                        env=loop_env(loop, tree_dir), log=d / "log")
                            r["ok"] = agentbench_count(d)[0] if r["rc"] == 0 else None
                        else:
                            fn = {"aiperf": run_aiperf, "inference-perf": run_inference_perf,
                                  "guidellm": run_guidellm, "floor": run_floor}[tool]
                            r = fn(Path(exe), srv.url, n, args.concurrency, args.context, d, srv)  # type: ignore[arg-type]
                            if r["rc"]:
                                print(f"[{tool}] exit {r['rc']}; log: {d}", file=sys.stderr)
                        runs.append(_row(name, kind, n, r))
                    rows.append(best(runs))
                    print_rows(rows[-1:])
            above_floor([r for r in rows if r["server"] == kind])
        finally:
            srv.stop()
    return rows


def above_floor(rows: list[dict[str, Any]]) -> None:
    """What each agentbench row costs above the floor client on the same server: the
    client's own work, per request and per read."""
    floor = next((r for r in rows if r["tool"] == "floor (C)"), None)
    if floor is None or floor["cpu_ms_window"] is None:
        return
    for r in rows:
        if r["tool"].startswith(("agentbench", "before")) and r["cpu_ms_window"] is not None:
            extra = r["cpu_ms_window"] - floor["cpu_ms_window"]
            per_read = f", {extra * 1e3 / r['reads']:.1f} us per read" \
                if (r.get("reads") or 0) > 2 else ""
            print(f"  {r['tool']}: {extra:.2f} ms per request above the floor in window"
                  f"{per_read}")


def section_long(args: argparse.Namespace, n: int, work: Path) -> list[dict[str, Any]]:
    """Long prompts: sessions that grow their context (16 turns a tree, each turn re-sends
    the last one's blocks), and every prompt new (one turn a tree: every block generated)."""
    rows = []
    k = args.long_context // 1000
    for kind in [k for k in ("nginx", "chunked") if k in args.servers]:
        srv = Server(kind)
        try:
            for label, turns in ((f"agentbench {k}K", 16), (f"agentbench {k}K new", 1)):
                runs = []
                for rep in range(args.repeat):
                    d = work / f"long-{kind}-{turns}-{rep}"
                    d.mkdir(parents=True)
                    r = measure(agentbench_cmd(srv.url, n, args.long_concurrency,
                                               args.long_context, 1, d, turns=turns),
                                srv, log=d / "log")
                    r["ok"] = agentbench_count(d)[0] if r["rc"] == 0 else None
                    runs.append(_row(label, kind, n, r))
                rows.append(best(runs))
                print_rows(rows[-1:])
        finally:
            srv.stop()
    return rows


def section_scaling(args: argparse.Namespace, n: int, work: Path) -> list[dict[str, Any]]:
    """1 vs 2 worker processes, unpinned (a 2-worker client needs two cores; on a
    machine with few cores the server competes with the client for them)."""
    rows = []
    for kind in [k for k in ("nginx", "chunked") if k in args.servers]:
        srv = Server(kind)
        try:
            for w in (1, 2):
                runs = []
                for rep in range(args.repeat):
                    d = work / f"scale-{kind}-{w}-{rep}"
                    d.mkdir(parents=True)
                    cmd = agentbench_cmd(srv.url, n, args.concurrency, args.context, w, d)
                    r = _measure_unpinned(cmd, srv, d / "log")
                    r["ok"] = agentbench_count(d)[0] if r["rc"] == 0 else None
                    runs.append(_row(f"agentbench w={w}", kind, n, r))
                rows.append(best(runs))
                print_rows(rows[-1:])
        finally:
            srv.stop()
    for kind in ("nginx", "chunked"):
        one = [r for r in rows if r["server"] == kind and r["tool"].endswith("w=1")][0]
        two = [r for r in rows if r["server"] == kind and r["tool"].endswith("w=2")][0]
        if one["req_s_median"] and two["req_s_median"]:
            print(f"scaling on {kind}: 2 workers / 1 worker = "
                  f"{two['req_s_median'] / one['req_s_median']:.2f}x (medians), "
                  f"{two['req_s'] / one['req_s']:.2f}x (best runs)")
    return rows


def _measure_unpinned(cmd: list[str], srv: Server, log: Path) -> dict[str, Any]:
    saved = cores
    try:
        globals()["cores"] = lambda: (CPUS, CPUS)
        return measure(cmd, srv, log=log)
    finally:
        globals()["cores"] = saved


def section_inflation(args: argparse.Namespace, n: int, work: Path) -> list[dict[str, Any]]:
    """agentbench's TTFT minus the server's own (request read -> first token written),
    per request, joined on X-Request-ID; both on the same perf_counter_ns clock. With each
    run's schedule lag, streamed events per second and saturation verdict (summary.json's
    ``client_saturated``), for every agentbench variant (``--before``, event loops)."""
    import pyarrow.parquet as pq

    from agentbench.metrics import summarize

    out = []
    for lanes, itl in ((64, args.itl), (256, args.itl), (256, args.itl / 5)):
        srv = Server("timed", ttft=args.ttft, itl=itl)
        try:
            for name, loop, tree_dir in variants(args):
                d = work / f"inflation-{lanes}-{itl}-{name.replace(' ', '-')}"
                d.mkdir(parents=True)
                mark = len(srv.log.read_text().splitlines()) if srv.log.exists() else 0
                r = measure(agentbench_cmd(srv.url, n, lanes, args.context, 1, d), srv,
                            env=loop_env(loop, tree_dir), log=d / "log")
                _, info = agentbench_count(d)
                run_dir = next(p for p in d.iterdir() if (p / "requests.parquet").exists())
                t = pq.read_table(run_dir / "requests.parquet").to_pandas()
                truth = {}
                for line in srv.log.read_text().splitlines()[mark:]:
                    rid, first, _, _, recv = line.split()
                    if not rid.isdigit():  # start-up calibration requests carry no id
                        continue
                    truth[int(rid)] = (int(first) - int(recv)) / 1e6
                diffs, late = [], []
                for row in t.itertuples():
                    if row.request_id in truth and row.first_token_ns == row.first_token_ns:
                        client = (row.first_token_ns - row.sent_ns) / 1e6
                        diffs.append(client - truth[row.request_id])
                        late.append(client)
                sat = summarize(run_dir, write=False).get("client_saturated") or {}
                fig = next(iter((sat.get("figures") or {}).values()), {})
                st = replay_stats(str(run_dir))
                res = {"tool": name, "lanes": lanes, "itl_ms": itl * 1e3,
                       "requests": len(diffs), "server_ttft_ms": args.ttft * 1e3,
                       "events_per_s": st["chunks_per_s"],
                       "client_ttft_p50_ms": float(np.percentile(late, 50)),
                       "client_ttft_p99_ms": float(np.percentile(late, 99)),
                       "inflation_p50_ms": float(np.percentile(diffs, 50)),
                       "inflation_p99_ms": float(np.percentile(diffs, 99)),
                       "inflation_min_ms": float(np.min(diffs)),
                       "lag_p50_ms": st["lag_p50_ms"], "lag_p99_ms": st["lag_p99_ms"],
                       "in_flight_mean": fig.get("in_flight_mean"),
                       "saturated": sat.get("saturated"), "reasons": sat.get("reasons"),
                       "reads": r.get("reads_per_request"), "rc": r["rc"],
                       "t0": info["clock"]["t0_perf_ns"]}
                print(f"{name}, {lanes} lanes, server TTFT {args.ttft * 1e3:.0f} ms ITL "
                      f"{itl * 1e3:g} ms: {res['events_per_s']:,.0f} events/s, "
                      f"{res['reads'] or 0:.1f} reads/req; client TTFT p50 "
                      f"{res['client_ttft_p50_ms']:.2f} / p99 {res['client_ttft_p99_ms']:.2f} "
                      f"ms; client minus server p50 {res['inflation_p50_ms']:.3f} ms, p99 "
                      f"{res['inflation_p99_ms']:.3f} ms; schedule lag p50 "
                      f"{res['lag_p50_ms']:.2f} / p99 {res['lag_p99_ms']:.2f} ms; in flight "
                      f"{res['in_flight_mean'] or 0:.0f} of {lanes}; saturated: "
                      f"{res['saturated']} ({len(diffs)} requests)")
                sys.stdout.flush()
                out.append(res)
        finally:
            srv.stop()
    return out


# ---------------------------------------------------------------- children


def synthetic_trace(roots: int, turns: int, context: int, block: int = 64,
                    think_mean_s: float = 0.0, seed: int = 0, vary: bool = False) -> Any:
    """Roots whose turn k re-sends turn k-1's blocks plus one new block; turn 0 has
    ``context`` tokens. Each root is its own hash scope (so its own trace copy's blocks)."""
    from agentbench.traces.model import Session, Trace, Turn

    rng = np.random.default_rng(seed)
    sessions = []
    for r in range(roots):
        ts = []
        for k in range(turns):
            n = context + k * block
            ids = np.arange(1, n // block + 1, dtype=np.int64)
            think = float(rng.exponential(think_mean_s)) if think_mean_s else 0.0
            out = int(rng.integers(TOKENS // 2, TOKENS * 3 // 2 + 1)) if vary else TOKENS
            ts.append(Turn(turn=k, t=float(k), think_s=think, api_s=None, input_tokens=n,
                           output_tokens=out, hash_ids=ids, block_size=block))
        sessions.append(Session(f"r{r}", None, "root", None, None, None, "bench", f"r{r}",
                                0.0, ts))
    return Trace(sessions, name="bench")


def section_capacity(args: argparse.Namespace, n: int, work: Path) -> list[dict[str, Any]]:
    """How many streamed events per second one client process sustains before the
    saturation check (``client_saturated`` in summary.json) fires: 256 lanes against the
    timed server (50 ms TTFT, 64-192 output tokens) at shrinking ITLs, one worker on the
    client core; then the
    fastest of those rates with 2 workers, unpinned. ``--workers auto`` divides the offered
    event rate by the per-worker figure (``agentbench.replay.workers.EVENTS_PER_WORKER``)."""
    from agentbench.metrics import summarize

    out = []
    plan = [(1, itl) for itl in (0.02, 0.01, 0.005, 0.0035, 0.0025, 0.0018)]
    plan += [(2, 0.0025), (2, 0.0018)]
    for workers, itl in plan:
        srv = Server("timed", ttft=0.05, itl=itl, fixed_tokens=False)
        try:
            d = work / f"capacity-{workers}-{itl}"
            d.mkdir(parents=True)
            # output lengths 64-192 tokens: lanes that all took exactly as long would end
            # together round after round, and the bursts, not the rate, would be measured
            cmd = agentbench_cmd(srv.url, n, 256, args.context, workers, d, vary=True)
            r = (measure(cmd, srv, log=d / "log") if workers == 1
                 else _measure_unpinned(cmd, srv, d / "log"))
            run_dir = next(p for p in d.iterdir() if (p / "requests.parquet").exists())
            sat = summarize(run_dir, write=False).get("client_saturated") or {}
            fig = next(iter((sat.get("figures") or {}).values()), {})
            st = replay_stats(str(run_dir))
            steady = st["steady_lag_p99_ms"]
            row = {"workers": workers, "steady_lag_p99_ms": steady, "itl_ms": itl * 1e3,
                   "events_per_s": st["chunks_per_s"],
                   "offered_events_per_s": 256 / itl, "lag_p50_ms": st["lag_p50_ms"],
                   "lag_p99_ms": st["lag_p99_ms"], "in_flight_ratio": fig.get("in_flight_ratio"),
                   "saturated": sat.get("saturated"), "reasons": sat.get("reasons"),
                   "rc": r["rc"]}
            print(f"{workers} worker(s), ITL {itl * 1e3:g} ms (offered "
                  f"{row['offered_events_per_s']:,.0f} events/s while streaming): "
                  f"{row['events_per_s']:,.0f} events/s; lag p50 {row['lag_p50_ms']:.1f} / "
                  f"p99 {row['lag_p99_ms']:.1f} ms (after each lane's first request: p99 "
                  f"{steady:.1f} ms); in flight {row['in_flight_ratio']}; "
                  f"saturated: {row['saturated']} {row['reasons'] or ''}")
            sys.stdout.flush()
            out.append(row)
        finally:
            srv.stop()
    fine = [r["events_per_s"] for r in out if r["workers"] == 1 and r["saturated"] is False]
    print(f"one worker, unsaturated, at most {max(fine, default=0):,.0f} events/s")
    return out


def child_run(url: str, lanes: int, requests: int, context: int, think_mean_s: float,
              out_dir: str, workers: int = 1, max_turns: int = 16, vary: bool = False
              ) -> dict[str, Any]:
    """One agentbench run, all-in (the parent reads the results folder)."""
    from agentbench.replay import run_scenario
    from agentbench.scenario import Scenario  # a module in trees before the packages (--before)

    # up to 16 turns per tree (contexts grow by one block a turn), as many trees as needed;
    # one turn per tree: every request a new prompt (each tree its own cache-bust salt)
    turns = min(max_turns, max(1, -(-requests // lanes)))
    trace = synthetic_trace(max(lanes, -(-requests // turns)), turns, context,
                            think_mean_s=think_mean_s, vary=vary)
    sc = Scenario.model_validate({
        "name": "bench",
        "endpoints": [{"kind": "openai", "url": url, "model": "m", "ignore_eos": True}],
        "trace": {"kind": "file", "source": "synthetic"},
        "load": {"kind": "lanes", "concurrency": lanes},
        "timing": {"time_scale": 1.0, "idle_cap_s": None},
        "limits": {"recycle": False, "max_requests": requests},
        "output": {"dir": out_dir, "run_id": f"c{lanes}"},
        "server_metrics": {"enabled": False},
    })
    try:
        from agentbench.results.writer import ResultsWriter
    except ImportError:  # a tree (--before) from before the results package
        from agentbench.replay.writer import ResultsWriter  # type: ignore[no-redef]

    loop = "asyncio"
    if os.environ.get("AB_BENCH_LOOP") == "uvloop":
        from agentbench.transport.loop import use_fast_loop

        loop = use_fast_loop()
    reads = [0, 0]  # socket reads of response bodies, requests (this process's)

    def count(rec: Any) -> None:
        # a tree from before RequestRecord.reads (--before) kept one chunk per read
        reads[0] += getattr(rec, "reads", None) or len(rec.chunks)
        reads[1] += 1

    try:  # the replay turns each record into its row with the transport's finish_record
        from agentbench.replay import tree as replay_tree

        finish = replay_tree.finish_record

        def finish_counted(rec: Any) -> Any:
            count(rec)
            return finish(rec)

        replay_tree.finish_record = finish_counted  # type: ignore[assignment]
    except AttributeError:  # a tree (--before) whose writer took the record itself
        add = ResultsWriter.add_request

        def counted(self: Any, rec: Any, *args: Any, **kwargs: Any) -> Any:
            count(rec)
            return add(self, rec, *args, **kwargs)

        ResultsWriter.add_request = counted  # type: ignore[method-assign]
    res = asyncio.run(run_scenario(sc, trace=trace, progress=False, workers=workers))
    return {"run_dir": str(res.run_dir),
            "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "health": res.info.get("client_health", {}), "loop": loop,
            # worker processes count their own reads: known for one process only
            "reads_per_request": reads[0] / reads[1] if reads[1] and workers == 1 else None}


def replay_stats(run_dir: str) -> dict[str, Any]:
    import pyarrow.parquet as pq

    from agentbench.results import schema as records

    t = pq.read_table(Path(run_dir) / records.REQUESTS_FILE,
                      columns=["lane", "status", "scheduled_ns", "sent_ns", "end_ns",
                               "token_events"]).to_pandas().sort_values("scheduled_ns")
    window_s = (t.end_ns.max() - t.sent_ns.min()) / 1e9
    lag = (t.sent_ns - t.scheduled_ns).to_numpy() / 1e6
    # without each lane's first request: the lanes all start at once, and sending every
    # lane's first request together is a burst, not a rate
    later = (t.groupby("lane").cumcount() > 0).to_numpy()
    return {"requests": len(t), "ok": int((t.status == records.OK).sum()),
            "req_per_s": len(t) / window_s,
            "chunks_per_s": float(t.token_events.sum()) / window_s,
            "lag_p50_ms": float(np.percentile(lag, 50)),
            "lag_p99_ms": float(np.percentile(lag, 99)),
            "steady_lag_p99_ms": float(np.percentile(lag[later], 99)) if later.any()
            else float("nan")}


def child_build(context: int) -> dict[str, Any]:
    from agentbench.prompts.layout import (
        BlockCache,
        SessionPrompt,
        body_template,
        chat_overhead,
    )

    trace = synthetic_trace(1, 3, context)
    s = trace.sessions[0]
    cache = BlockCache("chat")
    tpl = body_template("chat", "m", {}, ignore_eos=True)
    memo = SessionPrompt(cache, 1, s.session_id, chat_overhead(), 0)
    t0 = time.perf_counter()
    body = tpl.render_fragments(memo.build(s.turns[0], s.turns[1]), TOKENS)
    cold = time.perf_counter() - t0
    warm = []
    for _ in range(200):  # turn 1 again and again: two new blocks, the rest cached
        memo2 = SessionPrompt(cache, 1, s.session_id, chat_overhead(), 0)
        memo2.build(s.turns[0], s.turns[1])
        t0 = time.perf_counter()
        body = tpl.render_fragments(memo2.build(s.turns[1], s.turns[2]), TOKENS)
        warm.append(time.perf_counter() - t0)
    return {"context_tokens": context, "body_bytes": len(body), "cold_ms": cold * 1e3,
            "warm_p50_ms": float(np.median(warm)) * 1e3,
            "warm_p99_ms": float(np.percentile(warm, 99)) * 1e3}


def spawn(args: list[str], timeout: float) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True,
                         text=True, timeout=timeout, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"child {args} failed:\n{out.stderr[-2000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def section_replay(args: argparse.Namespace, requests: int, work: Path) -> None:
    """Issue 3's figures: lanes 1/64/256 (CPU all-in from rusage), paced schedule lag, RSS
    at 1,000 lanes x 142K tokens, prompt build time."""
    srv = Server("nginx" if shutil.which("nginx") else "chunked")
    try:
        print(f"\n{'lanes':>6} {'requests':>9} {'req/s':>8} {'chunks/s':>10} "
              f"{'CPU s/1k req':>13} {'lag p50 ms':>11} {'lag p99 ms':>11}")
        for lanes in (1, 64, 256):
            d = work / f"replay-{lanes}"
            d.mkdir(parents=True)
            r = measure(agentbench_cmd(srv.url, max(requests, lanes), lanes, args.context, 1,
                                       d), srv, log=d / "log")
            _, info = agentbench_count(d)
            s = replay_stats(str(next(p for p in d.iterdir() if p.is_dir())))
            print(f"{lanes:>6} {s['requests']:>9,} {s['req_per_s']:>8,.0f} "
                  f"{s['chunks_per_s']:>10,.0f} {r['cpu_all_s'] / s['requests'] * 1e3:>13.2f} "
                  f"{s['lag_p50_ms']:>11.2f} {s['lag_p99_ms']:>11.2f}")
        d = work / "replay-paced"
        d.mkdir(parents=True)
        r = measure(agentbench_cmd(srv.url, requests, 256, args.context, 1, d, think=0.5), srv,
                    log=d / "log")
        _, info = agentbench_count(d)
        s = replay_stats(str(next(p for p in d.iterdir() if p.is_dir())))
        h = info.get("client_health", {})
        print(f"\npaced: 256 lanes, think time exp(mean 0.5 s): {s['req_per_s']:,.0f} req/s, "
              f"schedule lag p50 {s['lag_p50_ms']:.2f} ms, p99 {s['lag_p99_ms']:.2f} ms; "
              f"loop stalls >10 ms: {h.get('loop_stalls_over_10ms')}")
        if not args.quick:
            r2 = spawn(["run", srv.url, "1000", "2000", "142000", "0", str(work / "rss")], 1800)
            print(f"\nmemory: 1000 lanes x 142,000-token contexts: peak RSS "
                  f"{r2['maxrss_mb']:,.0f} MB")
        b = spawn(["build", "142000"], 300)
        print(f"\nbuild a {b['context_tokens']:,}-token chat turn ({b['body_bytes'] / 1e6:.2f} MB "
              f"body): cold {b['cold_ms']:.1f} ms, warm p50 {b['warm_p50_ms']:.3f} ms / p99 "
              f"{b['warm_p99_ms']:.3f} ms")
    finally:
        srv.stop()


# ---------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller runs (a smoke check)")
    ap.add_argument("--sections", nargs="+", choices=SECTIONS,
                    default=["peers", "long", "scaling", "inflation"])
    ap.add_argument("--servers", nargs="+", choices=("nginx", "chunked", "stepped"),
                    default=["nginx", "chunked", "stepped"],
                    help="the servers of the peers, long and scaling sections")
    ap.add_argument("--requests", type=int, default=None, help="requests per run")
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--context", type=int, default=1000, help="prompt tokens")
    ap.add_argument("--long-context", type=int, default=32_000)
    ap.add_argument("--long-concurrency", type=int, default=64)
    ap.add_argument("--ttft", type=float, default=0.05, help="timed server TTFT, s")
    ap.add_argument("--itl", type=float, default=0.005, help="timed server ITL, s")
    ap.add_argument("--repeat", type=int, default=3, help="agentbench repeats (best/median)")
    ap.add_argument("--aiperf", type=Path, default=CACHE / "aiperf-venv" / "bin" / "aiperf")
    ap.add_argument("--inference-perf", type=Path,
                    default=CACHE / "peers" / "ip-venv" / "bin" / "inference-perf")
    ap.add_argument("--guidellm", type=Path,
                    default=CACHE / "peers" / "gl-venv" / "bin" / "guidellm")
    ap.add_argument("--before", type=Path, default=None,
                    help="also measure the agentbench package found in this folder (e.g. "
                         "`git archive HEAD agentbench | tar -x -C DIR`), as 'before'")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    ap.add_argument("--keep", action="store_true", help="keep logs and results folders")
    ap.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "run":
            url, lanes, reqs, ctx, think, out_dir, *w = rest
            res = child_run(url, int(lanes), int(reqs), int(ctx), float(think), out_dir,
                            int(w[0]) if w else 1, int(w[1]) if len(w) > 1 else 16,
                            len(w) > 2 and w[2] == "1")
        else:
            res = child_build(int(rest[0]))
        print(json.dumps(res))
        return
    if not (shutil.which("nginx") and INSTANT.exists()):
        raise SystemExit("nginx not found: apt-get install -y nginx-light "
                         f"(used through {INSTANT})")
    os.sched_setaffinity(0, set(cores()[1]))  # this process samples; keep it off the client
    n = args.requests or (600 if args.quick else 4000)
    if args.quick:
        args.repeat = 1
    work = Path(tempfile.mkdtemp(prefix="ab-client-bench-"))
    client, server = cores()
    print(f"client benchmark {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, {os.cpu_count()} CPUs "
          f"({os.uname().machine}), load {os.getloadavg()[0]:.1f}; client on CPU {client}, "
          f"servers on {server}; {TOKENS}-token streams, {args.context}-token prompts, "
          f"concurrency {args.concurrency}, {n} requests per run")
    out: dict[str, Any] = {}
    try:
        if "peers" in args.sections:
            print("\n== peers (agentbench: best of repeats)")
            out["peers"] = section_peers(args, n, work)
        if "long" in args.sections:
            print(f"\n== {args.long_context:,}-token prompts, {args.long_concurrency} lanes")
            out["long"] = section_long(args, n, work)
        if "scaling" in args.sections:
            print("\n== worker processes (client and server unpinned)")
            out["scaling"] = section_scaling(args, n, work)
        if "inflation" in args.sections:
            print("\n== TTFT self-inflation")
            out["inflation"] = section_inflation(args, max(500, n // 2), work)
        if "capacity" in args.sections:
            print("\n== events per second one worker sustains (256 lanes, timed server)")
            out["capacity"] = section_capacity(args, max(500, n // 2), work)
        if "replay" in args.sections:
            section_replay(args, n, work)
    finally:
        if args.json:
            args.json.write_text(json.dumps(out, indent=1, default=str))
        if args.keep:
            print(f"\nlogs and results kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
