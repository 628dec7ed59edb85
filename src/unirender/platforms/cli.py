"""``unirender doctor`` and ``unirender xorg-config``."""

from __future__ import annotations

import argparse
import json
import sys


def register(subparsers) -> None:
    doctor = subparsers.add_parser("doctor", help="report which headless platforms work here, and why not")
    doctor.add_argument("--width", type=int, default=300, help="requested frame width (default 300)")
    doctor.add_argument("--height", type=int, default=300, help="requested frame height (default 300)")
    doctor.add_argument("--x-display", default=None, help="check only this X display (':1', ':1.0')")
    doctor.add_argument(
        "--no-start", action="store_true", help="do not start an Xvfb to check virtual displays"
    )
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.set_defaults(func=run_doctor)

    xorg = subparsers.add_parser("xorg-config", help="print an Xorg config with one screen per NVIDIA GPU")
    xorg.add_argument("--width", type=int, default=1024)
    xorg.add_argument("--height", type=int, default=768)
    xorg.add_argument("--exclude-device", type=int, action="append", default=[], metavar="N",
                      help="leave GPU N out (repeatable)")  # fmt: skip
    xorg.add_argument("--display", type=int, default=0, help="display number for the printed Xorg command")
    xorg.set_defaults(func=run_xorg_config)


def _positive(parser_name: str, **values: int) -> str | None:
    for name, value in values.items():
        if value <= 0:
            return f"{parser_name}: --{name} must be positive, got {value}"
    return None


def run_doctor(args: argparse.Namespace) -> int:
    from unirender.platforms.doctor import build_report, render_report
    from unirender.platforms.request import parse_x_display

    error = _positive("doctor", width=args.width, height=args.height)
    if error is None and args.x_display is not None:
        try:
            parse_x_display(args.x_display)
        except ValueError as exc:
            error = f"doctor: {exc}"
    if error:
        print(error, file=sys.stderr)
        return 2
    report = build_report(args.width, args.height, args.x_display, start_xvfb=not args.no_start)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render_report(report)
    return 0 if report["usable"] else 1


def run_xorg_config(args: argparse.Namespace) -> int:
    from unirender.platforms.xorg import discover_nvidia_gpus, render_config, xorg_command

    error = _positive("xorg-config", width=args.width, height=args.height)
    if error:
        print(error, file=sys.stderr)
        return 2
    gpus = discover_nvidia_gpus(tuple(args.exclude_device))
    if not gpus:
        print("xorg-config: no NVIDIA GPU found (lspci -vmm); nothing to configure. "
              "Without a GPU use CloudRendering (Vulkan) or a virtual display (Xvfb).", file=sys.stderr)  # fmt: skip
        return 1
    sys.stdout.write(render_config(gpus, args.width, args.height))
    command = " ".join(xorg_command("/etc/X11/xorg-unirender.conf", args.display))
    print(f"# Save as /etc/X11/xorg-unirender.conf and run as root: {command}")
    print(f"# GPU i is then X screen :{args.display}.i (pass x_display=':{args.display}.i').")
    return 0
