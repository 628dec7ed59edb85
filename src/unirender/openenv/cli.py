"""``unirender openenv serve SPEC``: the declared environment as an OpenEnv server (docs/openenv.md)."""

from __future__ import annotations

import argparse
import sys

from unirender.errors import SpecError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "openenv",
        help="serve an environment to OpenEnv clients (needs the 'openenv' extra)",
        description="OpenEnv (openenv-core) servers for unirender environments: docs/openenv.md.",
    )
    sub = p.add_subparsers(dest="openenv_command", metavar="COMMAND")
    serve = sub.add_parser(
        "serve",
        help="serve SPEC's environment: /ws, /reset, /step, /state, /health, /schema, /metadata",
        description="Serve the environment SPEC declares (a bare environment or a job spec; AI2-THOR or "
        "ML-Agents) to OpenEnv clients, one player per WebSocket session. Tokens come from --token-file; with "
        "none, it serves loopback only (a non-loopback --host is refused unless --allow-open).",
    )
    serve.add_argument("spec", help="YAML/JSON/TOML spec file with the environment")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    serve.add_argument(
        "--max-sessions",
        type=int,
        default=4,
        help="players at once (WebSocket sessions and HTTP resets together; default 4)",
    )
    serve.add_argument("--token-file", default=None, help="tokens clients must send, one per line")
    serve.add_argument(
        "--backend",
        default="local",
        choices=["local", "ray", "service"],
        help="where players run (default local)",
    )
    serve.add_argument(
        "--backend-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of the backend (e.g. address=..., url=..., token=...); repeatable",
    )
    serve.add_argument(
        "--behavior", default=None, help="ML-Agents: the behavior observed (default: the first)"
    )
    serve.add_argument(
        "--allow-open",
        action="store_true",
        help="serve without tokens on a non-loopback --host (only on a private network)",
    )
    serve.set_defaults(func=run_serve)


def _options(pairs: list[str]) -> dict:
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SpecError(f"--backend-option {pair!r}: give KEY=VALUE")
        options[key] = value
    return options


def run_serve(args: argparse.Namespace) -> int:
    from unirender.openenv.app import load_served, read_tokens, serve

    try:
        tokens = read_tokens(args.token_file) if args.token_file else None
        served = load_served(
            args.spec,
            backend=args.backend,
            backend_options=_options(args.backend_option),
            max_sessions=args.max_sessions,
            behavior=args.behavior,
        )
    except (SpecError, ValueError) as exc:
        print(f"unirender openenv serve: {exc}", file=sys.stderr)
        return 2
    try:
        return serve(
            served,
            host=args.host,
            port=args.port,
            tokens=tokens,
            allow_open=args.allow_open,
            announce=lambda line: print(line, flush=True),
        )
    except (SpecError, OSError) as exc:
        print(f"unirender openenv serve: {exc}", file=sys.stderr)
        return 2
