"""``unirender`` command line: a thin dispatcher. Each subcommand lives next to the code it drives and
registers itself through a ``register(subparsers)`` function in the module listed below."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

# (module, help) — imported lazily so that one broken optional part never breaks the others.
SUBCOMMAND_MODULES = [
    "unirender.platforms.cli",  # doctor, xorg-config
    "unirender.spec.cli",  # spec check, spec schema
    "unirender.builds.cli",  # builds add, list, show, verify, rm, gc, tag, export, import, pull, import-ai2thor
    "unirender.jobs.cli",  # render, demo
    "unirender.service.cli",  # serve
    "unirender.openenv.cli",  # openenv serve
]


# Top-level modules that only an extra installs -> that extra (see pyproject.toml).
EXTRA_FOR_MODULE = {
    "moderngl": "player", "glcontext": "player", "wgpu": "player", "trimesh": "player",
    "werkzeug": "service", "prometheus_client": "service", "ray": "ray", "gymnasium": "gym", "gunicorn": "gunicorn",
    "openenv": "openenv", "fastapi": "openenv", "uvicorn": "openenv",
}


def missing_extra_message(exc: ModuleNotFoundError) -> str | None:
    """'this needs X: pip install ...' for a module an extra provides; None for any other missing module."""
    extra = EXTRA_FOR_MODULE.get((exc.name or "").split(".")[0])
    if extra is None:
        return None
    return f"unirender: this command needs the '{extra}' extra ({exc.name} is not installed):\n" \
        f"    pip install 'unirender[{extra}]'"


def build_parser() -> argparse.ArgumentParser:
    from unirender import __version__

    parser = argparse.ArgumentParser(
        prog="unirender", description="Declarative headless rendering for Unity-based environments."
    )
    parser.add_argument("--version", action="version", version=f"unirender {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and name.startswith(exc.name):
                continue  # that part is not built yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        rc = int(args.func(args) or 0)
        sys.stdout.flush()  # inside the try: a closed pipe shows up here at the latest
        return rc
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `unirender ... | head -1`: the reader has gone, which is not an error worth a traceback. Point stdout at
        # /dev/null so the interpreter's final flush does not raise again; 141 = 128 + SIGPIPE, as a shell tool.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except ModuleNotFoundError as exc:
        message = missing_extra_message(exc)
        if message is None:
            raise
        print(message, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
