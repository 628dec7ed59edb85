"""``unirender render JOB`` and ``unirender demo``."""

from __future__ import annotations

import argparse
import os
import sys

from unirender.errors import SpecError, UnirenderError


def register(sub) -> None:
    p = sub.add_parser("render", help="run a job spec (YAML/JSON/TOML) into a dataset")
    p.add_argument("spec", help="job spec file")
    p.add_argument("--workers", type=int, default=None, help="players side by side (default: spec, or auto)")
    p.add_argument("--out", default=None, help="output directory (default: the spec's output.directory)")
    p.add_argument(
        "--resume",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="continue a previous run of the same job in that directory (default), or start over",
    )
    p.add_argument("--quiet", action="store_true", help="no progress output, only the summary")
    p.add_argument(
        "--allow-build-change",
        action="store_true",
        help="resume even though the build's bytes differ from those the dataset was started with (docs/builds.md)",
    )
    p.add_argument(
        "--backend",
        choices=["local", "ray", "service"],
        default=None,
        help="where the players live: player processes driven from here (default), Ray actors (unirender[ray]), "
        "or sessions of a running `unirender serve` (--url); the dataset is written here either way",
    )
    p.add_argument(
        "--ray-address", default=None, help="Ray cluster to join (default: $RAY_ADDRESS, or a local one)"
    )
    p.add_argument("--url", default=None, help="the service for --backend service, e.g. http://render-host:8200")
    p.add_argument("--token", default=None, help="its bearer token (default: $UNIRENDER_TOKEN)")
    p.set_defaults(func=cmd_render)

    from unirender.spec.models import MODALITIES

    v = sub.add_parser("video", help="make mp4 videos of a dataset's episodes from its frames (unirender[video])")
    v.add_argument("dataset", help="a finished dataset's directory")
    v.add_argument("--episode", action="append", help="a unit id or an episode number (repeatable; default: all)")
    v.add_argument("--modality", action="append", choices=MODALITIES, help="repeatable (default: every one)")
    v.add_argument("--camera", action="append", help="'agent', a camera or sensor name (repeatable; default: all)")
    v.add_argument("--fps", type=float, default=None, help="default: the spec's output.video, else 30")
    v.add_argument("--quality", choices=["low", "medium", "high", "best"], default=None, help="default: high")
    v.add_argument("--codec", default=None, help="h264 (default), hevc, av1, vp9 or an FFmpeg encoder name")
    v.add_argument("--tile", action=argparse.BooleanOptionalAction, default=None,
                   help="one tiled video per episode (the contact sheet's layout)")
    v.add_argument("--out", default=None, help="where videos/ goes (default: the dataset's directory)")
    v.set_defaults(func=cmd_video)

    d = sub.add_parser("demo", help="render a short tour of a built-in scene in every modality")
    d.add_argument("--out", default="demo-output", help="output directory (default: ./demo-output)")
    d.add_argument("--size", type=int, default=256, help="image width and height (default 256)")
    d.add_argument("--transport", choices=["fifo", "wsgi"], default="fifo")
    d.add_argument("--resume", action=argparse.BooleanOptionalAction, default=False)
    d.add_argument("--quiet", action="store_true")
    from unirender.jobs.demo import DEMOS
    from unirender.spec.cli import add_family_option

    add_family_option(d, DEMOS, help="whose demo: ai2thor, a kitchen tour; mlagents, the reference player's "
                      "ReachTarget game, 2 agents, random actions")
    d.set_defaults(func=cmd_demo)


def _run(spec, args) -> int:
    from unirender.jobs.progress import reporter_for
    from unirender.jobs.runner import JobInterrupted, render

    backend = None
    try:
        kind = getattr(args, "backend", None)
        if kind:
            from unirender.cluster import create_backend

            options = {"address": args.ray_address} if kind == "ray" and args.ray_address else {}
            if kind == "service":
                if not getattr(args, "url", None):
                    raise SpecError("--backend service needs --url, the service's address (e.g. "
                                    "http://render-host:8200)", [("--url", "required with --backend service")])
                options = {"url": args.url, "token": args.token}
            backend = create_backend(kind, **options)
        result = render(
            spec,
            output_dir=getattr(args, "out", None),
            workers=getattr(args, "workers", None),
            resume=args.resume,
            reporter=reporter_for(sys.stderr, quiet=args.quiet),
            backend=backend,
            allow_build_change=getattr(args, "allow_build_change", False),
        )
    except JobInterrupted as exc:
        how = "stopped at once" if exc.immediate else "interrupted"
        print(
            f"unirender: {how}: {exc.frames_kept:,} frames kept in {exc.directory}, {exc.units_left} "
            f"unit{'s' if exc.units_left != 1 else ''} left; run the same command to resume",
            file=sys.stderr,
            flush=True,
        )
        if exc.immediate:  # a second Ctrl-C: no waiting for anything (the players die with us, PDEATHSIG)
            os._exit(130)
        return 130
    except UnirenderError as exc:
        return _failed(exc)
    except KeyboardInterrupt:
        print("unirender: interrupted before rendering started", file=sys.stderr)
        return 130
    finally:
        if backend is not None:
            backend.close()
    print(format_summary(result))
    return 0


def _failed(exc: UnirenderError) -> int:
    """A command's exit code for ``exc``, said on stderr: 2 for a spec (or option) error, 1 for any other."""
    print(f"unirender: {exc}", file=sys.stderr)
    return 2 if isinstance(exc, SpecError) else 1


def format_summary(result) -> str:
    s = result.summary()
    resumed = f", {s['episodes_resumed']} resumed" if s["episodes_resumed"] else ""
    where = f" on {s['platform']} ({s['device']})" if s["platform"] else ""
    head = (f"{s['frames_done']} frames in {s['episodes_total']} episode{'s' if s['episodes_total'] != 1 else ''}"
            f"{resumed} -> {result.directory}\n")
    if not s["frames_written"]:  # a resume of a finished job: no rate or share to speak of
        return head + "this run: nothing to render, every frame was already written"
    return (
        head + f"this run: {s['frames_written']} frames in {s['elapsed_s']:.1f} s ({s['frames_per_s']:.1f} frames/s) "
        f"with {s['workers']} player(s){where}; writing held the workers {100 * s['write_share']:.0f}% of "
        f"their time ({s['encode_s']:.1f} s of encoding+writing ran behind rendering)"
    )


def cmd_render(args) -> int:
    return _run(args.spec, args)


def cmd_demo(args) -> int:
    from unirender.jobs.demo import DEMOS, contact_sheet_for

    demo = DEMOS[args.family]
    rc = _run(demo.spec(args.out, args.size, args.transport), args)
    if rc == 0:
        print(f"contact sheet: {contact_sheet_for(args.out, frame=demo.sheet_frame)}")
    return rc


def cmd_video(args) -> int:
    """``unirender video DATASET``: options from the command line over the spec's ``output.video``."""
    from pydantic import ValidationError

    from unirender.jobs.dataset import Dataset
    from unirender.jobs.episode_videos import write_dataset_videos
    from unirender.spec.errors import format_errors, validation_problems
    from unirender.spec.models import VideoSpec

    try:
        dataset = Dataset(args.dataset)
        options = dict((dataset.manifest.get("spec", {}).get("output") or {}).get("video") or {})
        given = {"fps": args.fps, "quality": args.quality, "codec": args.codec, "tile": args.tile,
                 "modalities": args.modality, "cameras": args.camera}  # fmt: skip
        options.update({k: v for k, v in given.items() if v is not None})
        try:
            video = VideoSpec.model_validate(options)
        except ValidationError as exc:
            problems = validation_problems(exc, options, VideoSpec, prefix="output.video")
            raise SpecError(format_errors(problems, header="invalid video options"), problems) from None
        write_dataset_videos(args.dataset, episodes=args.episode, video=video, out=args.out,
                             progress=lambda path: print(path, flush=True))  # fmt: skip
    except UnirenderError as exc:
        return _failed(exc)
    return 0
