"""``unirender builds add|list|show|verify|rm|gc|tag|export|import|pull|import-ai2thor``: the build store's
command line (docs/builds.md)."""

from __future__ import annotations

import datetime
import json
import os
import sys

from unirender.builds import archive
from unirender.builds.errors import BuildError


def _size(value: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    text = value.strip().lower().removesuffix("b").removesuffix("i")
    return int(float(text[:-1]) * units[text[-1]]) if text and text[-1] in units else int(text)


def register(sub) -> None:
    p = sub.add_parser("builds", help="the content-addressed build store (add, list, show, pull, ...)")
    p.add_argument("--store", default=None, help="the store's folder (default: $UNIRENDER_BUILDS, or "
                   "$XDG_CACHE_HOME/unirender/builds)")  # fmt: skip
    b = p.add_subparsers(dest="builds_command", metavar="SUBCOMMAND", required=True)

    c = b.add_parser("add", help="add a build folder or archive (.zip, .tar.gz, .tar.zst)")
    c.add_argument("source")
    c.add_argument("--name", help="NAME[:TAG] to give it (tag: latest)")
    c.add_argument(
        "--max-size", type=_size, default=archive.DEFAULT_MAX_BYTES, help="refuse archives unpacking to more"
    )
    c.set_defaults(func=cmd_add)

    c = b.add_parser("list", help="the stored builds")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_list)

    c = b.add_parser("show", help="what a build is: family, Unity version, target, executable, size, ...")
    c.add_argument("reference", help="NAME[:TAG], sha256:DIGEST or ai2thor:COMMIT")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_show)

    # The subcommands that take only positional words (and --name): (name, help, positional words, --name?).
    for name, text, words, named in (
        ("verify", "re-hash a stored build; name every file that changed", ["reference"], False),
        ("tag", "name a build: tag REFERENCE NAME[:TAG]", ["reference", "name"], False),
        ("import", "import a tar made by `builds export` (its digest is kept and checked)", ["source"], True),
    ):
        c = b.add_parser(name, help=text)
        for word in words:
            c.add_argument(word)
        if named:
            c.add_argument("--name")
        c.set_defaults(func=globals()[f"cmd_{name}"])

    c = b.add_parser("rm", help="remove a build and its names (its bytes go with the next gc)")
    c.add_argument("reference")
    c.add_argument("--force", action="store_true", help="remove it even while a running player leases it")
    c.set_defaults(func=cmd_rm)

    c = b.add_parser(
        "gc", help="remove stored files no build uses (--max-bytes: evict unused builds, LRU first)"
    )
    c.add_argument("--max-bytes", type=_size, default=None, help="first evict least recently used builds no "
                   "running player leases until the store holds at most this (e.g. 50G)")  # fmt: skip
    c.set_defaults(func=cmd_gc)

    c = b.add_parser("export", help="a build as one tar, for another machine's `builds import`")
    c.add_argument("reference")
    c.add_argument("-o", "--output", required=True)
    c.set_defaults(func=cmd_export)

    c = b.add_parser("pull", help="download a build archive (http, https, file URLs; resumes) and add it")
    c.add_argument("url")
    c.add_argument("--sha256", help="the archive's sha256 (as AI2-THOR publishes it) or the build's digest; "
                   "checked before anything is published")  # fmt: skip
    c.add_argument("--name")
    c.add_argument("--max-size", type=_size, default=archive.DEFAULT_MAX_BYTES)
    c.add_argument("--token", default=None, help="a bearer token for a protected service's /v1/builds/{digest} "
                   "(default: $UNIRENDER_TOKEN)")  # fmt: skip
    c.set_defaults(func=cmd_pull)

    c = b.add_parser("import-ai2thor", help="AI2-THOR's download cache (~/.ai2thor/releases) into the store")
    c.add_argument("releases", nargs="?", default=None)
    c.set_defaults(func=cmd_import_ai2thor)


def _store(args):
    from unirender.builds import BuildStore

    return BuildStore(args.store)


def _guarded(command):
    def run(args) -> int:
        try:
            return command(args)
        except (BuildError, OSError) as exc:
            print(f"unirender: {exc}", file=sys.stderr)
            return 1

    run.__name__ = command.__name__
    return run


def _line(build) -> str:
    names = ",".join(build.names) or "-"
    return (f"{build.digest[:19]}  {names:<28} {build.info.family:<8} {build.info.target:<16} "
            f"{build.info.unity_version or '?':<13} {build.size / 1e6:>9.1f} MB")  # fmt: skip


def describe(build) -> str:
    info = build.info
    rows = [
        ("digest", build.digest),
        ("names", ", ".join(build.names) or "-"),
        ("family", info.family),
        ("unity version", info.unity_version or "unknown"),
        ("target", info.target),
        ("executable", str(build.executable) if build.executable else "-"),
        ("size", f"{build.size:,} bytes in {build.files:,} files"),
        ("added", datetime.datetime.fromtimestamp(build.added, datetime.UTC).isoformat(timespec="seconds")),
        ("source", build.source or "-"),
    ]
    if info.mlagents_package or info.communicator_version:
        rows.insert(5, ("ml-agents", f"com.unity.ml-agents {info.mlagents_package or '?'}, communicator "
                                     f"{info.communicator_version or '?'}"))  # fmt: skip
    if info.ai2thor_commit:
        rows.insert(5, ("ai2thor commit", info.ai2thor_commit))
    return "\n".join(f"{key:<15}{value}" for key, value in rows)


@_guarded
def cmd_add(args) -> int:
    build = _store(args).add(args.source, name=args.name, max_bytes=args.max_size)
    print(build.digest)
    return 0


@_guarded
def cmd_list(args) -> int:
    builds = _store(args).list()
    if args.json:
        print(json.dumps([b.as_json() for b in builds], indent=1))
        return 0
    for build in builds:
        print(_line(build))
    return 0


@_guarded
def cmd_show(args) -> int:
    build = _store(args).resolve(args.reference)
    print(json.dumps(build.as_json(), indent=1) if args.json else describe(build))
    return 0


@_guarded
def cmd_verify(args) -> int:
    store = _store(args)
    build = store.resolve(args.reference)
    changed = store.verify(build.digest)
    for path in changed:
        print(f"changed: {path}")
    if changed:
        print(f"unirender: {build.digest}: {len(changed)} file(s) differ from the manifest", file=sys.stderr)
        return 1
    print(f"{build.digest}: ok ({build.files:,} files)")
    return 0


@_guarded
def cmd_rm(args) -> int:
    build = _store(args).remove(args.reference, force=args.force)
    print(f"removed {build.digest} (run `unirender builds gc` to free its bytes)")
    return 0


@_guarded
def cmd_gc(args) -> int:
    files, freed = _store(args).gc(max_bytes=args.max_bytes)
    print(f"freed {freed:,} bytes in {files:,} files")
    return 0


@_guarded
def cmd_tag(args) -> int:
    store = _store(args)
    build = store.resolve(args.reference)
    store.tag(build.digest, args.name)
    print(f"{args.name if ':' in args.name else args.name + ':latest'} -> {build.digest}")
    return 0


@_guarded
def cmd_export(args) -> int:
    build = _store(args).export(args.reference, args.output)
    print(f"{build.digest} -> {args.output}")
    return 0


@_guarded
def cmd_import(args) -> int:
    print(_store(args).import_(args.source, name=args.name).digest)
    return 0


@_guarded
def cmd_pull(args) -> int:
    token = args.token or os.environ.get("UNIRENDER_TOKEN") or None
    build = _store(args).pull(
        args.url, sha256=args.sha256, name=args.name, max_bytes=args.max_size, token=token
    )
    print(build.digest)
    return 0


@_guarded
def cmd_import_ai2thor(args) -> int:
    for build in _store(args).import_ai2thor(args.releases):
        print(f"{build.digest}  {', '.join(build.names)}")
    return 0
