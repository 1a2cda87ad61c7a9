"""``toolbox serve model=DIR [engine=torch|hf|vllm|http] [engine.KEY=VALUE ...] --port 8000``."""

from __future__ import annotations

import argparse
from typing import Any

SERVE_ARGS_HELP = (
    "model=DIR (a save_pretrained folder), engine=torch|hf|vllm|http (default torch), and "
    "engine.KEY=VALUE options of that engine (engine.max_batch_size=64, engine.num_threads=1)"
)


def parse_serve_args(items: list[str]) -> tuple[str, str, dict[str, Any]]:
    """``model``, ``engine`` and the ``engine.*`` overrides from key=value items."""
    import yaml

    from toolbox.core.errors import ConfigError

    model, engine, overrides = None, "torch", {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"toolbox serve: {item!r} is not key=value; e.g. model=results/run/model")
        if key == "model":
            model = value
        elif key == "engine":
            engine = value
        elif key.startswith("engine."):
            overrides[key.removeprefix("engine.")] = yaml.safe_load(value) if value else value
        else:
            raise ConfigError(
                f"toolbox serve: unknown argument {key!r}; expected model=, engine= or engine.KEY="
            )
    if model is None:
        raise ConfigError("toolbox serve needs model=DIR (a folder written by save_pretrained)")
    return model, engine, overrides


def cmd_serve(args: argparse.Namespace) -> int:
    from pathlib import Path

    from toolbox.core.errors import ConfigError
    from toolbox.serving.openai.app import build_engine, serve
    from toolbox.serving.openai.request import Limits

    model, engine_name, overrides = parse_serve_args(args.args)
    if engine_name != "http" and not Path(model).exists():
        raise ConfigError(
            f"toolbox serve: model={model} does not exist (a folder written by save_pretrained)"
        )
    if args.max_queue is not None and engine_name == "torch":
        overrides.setdefault("max_queue_size", args.max_queue)
    engine = build_engine(model, engine_name, overrides)
    name = args.served_model_name or model
    print(f"toolbox serve: {name} ({engine_name}) on http://{args.host}:{args.port}/v1", flush=True)
    serve(
        engine,
        name,
        host=args.host,
        port=args.port,
        api_key=args.api_key,
        max_queue=args.max_queue,
        drain_timeout=args.drain_timeout,
        log_level=args.log_level,
        limits=Limits(
            max_body_bytes=args.max_request_bytes,
            max_prompt_chars=args.max_prompt_chars,
            allow_unknown_fields=args.allow_unknown_fields,
            header_timeout_s=args.header_timeout,
            body_timeout_s=args.body_timeout,
        ),
        trace=args.trace,
    )
    return 0


def add_serve_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve a model with an OpenAI-compatible HTTP API")
    p.add_argument("args", nargs="*", help=SERVE_ARGS_HELP)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", default=None, help="require Authorization: Bearer KEY on /v1 routes")
    p.add_argument("--max-queue", type=int, default=None, help="most requests waiting; more are answered 429")
    p.add_argument("--served-model-name", default=None, help="the model name clients send (default: model=)")
    p.add_argument("--drain-timeout", type=float, default=60.0, help="seconds shutdown waits for requests")
    p.add_argument("--log-level", default="warning")
    p.add_argument(
        "--max-request-bytes", type=int, default=8 * 2**20, help="larger request bodies are answered 413"
    )
    p.add_argument(
        "--max-prompt-chars",
        type=int,
        default=None,
        help="longer prompts are refused before tokenizing (default: the context x the longest token)",
    )
    p.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        help="seconds a request's headers may take to arrive; slower ones get 408 and are closed",
    )
    p.add_argument(
        "--body-timeout",
        type=float,
        default=30.0,
        help="seconds a request's body may take to arrive; slower ones get 408 and are closed",
    )
    p.add_argument(
        "--allow-unknown-fields",
        action="store_true",
        help="ignore request fields this server does not implement (default: a 400 naming them)",
    )
    p.add_argument(
        "--trace",
        default=None,
        metavar="FILE",
        help="record every request and response (redacted, never the API key) into this trace store "
        "(.sqlite or .jsonl); off by default",
    )
    p.set_defaults(fn=cmd_serve)
