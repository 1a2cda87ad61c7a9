#!/usr/bin/env bash
# DDP and FSDP single-GPU smoke runs (nccl, bf16) on a CUDA machine; prints one JSON object.
# Usage: bash benchmarks/gpu_smoke.sh [--steps 30] [--nproc 1] [--out results/gpu_smoke]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python )}"
exec "$PY" benchmarks/gpu_smoke.py "$@"
