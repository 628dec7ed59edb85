"""``unirender serve``: the render service on waitress (zero configuration: loopback, port 8200)."""

from __future__ import annotations

import argparse
import sys

from unirender.errors import SpecError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "serve",
        help="run the HTTP render service (sessions, renders, jobs; also the WSGI players' /train)",
        description="Run the render service. Client tokens come from the config file (tokens:) or "
        "UNIRENDER_TOKENS; with none, it serves loopback only (a non-loopback --host is refused unless "
        "--allow-open).",
    )
    p.add_argument("--host", default=None, help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default 8200; 0 picks a free one)")
    p.add_argument("--config", default=None, help="YAML/JSON/TOML service config (default $UNIRENDER_CONFIG)")
    p.add_argument("--data-root", default=None, help="job outputs, player logs and the service's records (service.sqlite3; one service per data root); "
                   "default $XDG_DATA_HOME/unirender, i.e. ~/.local/share/unirender")
    p.add_argument("--backend", default=None, choices=["local", "ray"], help="session backend (default local)")
    p.add_argument("--allow-open", action="store_true", default=None,
                   help="serve without tokens on a non-loopback --host (only where the network itself is private, "
                   "e.g. a container's port published on the host's 127.0.0.1)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from unirender.service.config import load_config
    from unirender.service.server import serve

    try:
        config = load_config(args.config, host=args.host, port=args.port, data_root=args.data_root,
                             backend=args.backend, allow_open=args.allow_open)
    except SpecError as exc:
        print(f"unirender serve: {exc}")
        return 2
    from unirender.service.data_root import DataRootError
    from unirender.service.store import StoreError

    try:
        return serve(config)
    except (SpecError, DataRootError, StoreError) as exc:  # bad backend_options; the data root is taken or
        print(f"unirender serve: {exc}", file=sys.stderr)  # its database unusable: nothing was started
        return 2
