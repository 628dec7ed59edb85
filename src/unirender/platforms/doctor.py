"""``unirender doctor``: every platform with its status, reasons, devices and install instructions.

``build_report()`` returns plain data (the ``--json`` output); ``render_report()`` draws it with rich.
"""

from __future__ import annotations

import re

from unirender.errors import PlatformError
from unirender.platforms import chromium, probes
from unirender.platforms.classes import (
    EGL,
    PACKAGES,
    CloudRendering,
    Linux64,
    LinuxHeadlessSimulation,
    OSXIntel64,
    WebGL,
    apt_line,
)
from unirender.platforms.devices import Device, looks_software
from unirender.platforms.request import PlatformRequest
from unirender.platforms.resolve import VIRTUAL, auto_order
from unirender.platforms.x11 import find_screen, list_display_numbers, probe_display
from unirender.platforms.xvfb import ScreenSpec, start_xvfb, xvfb_path


def _row(name: str, assessment, request: PlatformRequest, via: str | None = None, scope: str = "") -> dict:
    a = assessment
    status = "usable" if a.usable else ("unusable" if a.applicable else "not applicable")
    return {
        "platform": name,
        "via": via,
        "scope": scope,
        "status": status,
        "reasons": list(a.reasons),
        "notes": list(a.notes),
        "device": a.device.to_dict() if a.device else None,
        "devices": [d.to_dict() for d in a.devices],
        "env": dict(a.env),
        "args": list(a.args),
        "instructions": "" if a.usable or not a.applicable else a.platform.dependency_instructions(request),
    }


def _webgl_row(request: PlatformRequest) -> dict:
    """The WebGL row, with the renderer headless Chromium really gets (one browser run on a test page)."""
    assessment = WebGL().assess(request)
    if assessment.usable and assessment.device is not None:
        binary = assessment.env[chromium.ENV_VAR]
        renderer = chromium.SWIFTSHADER if assessment.device.software else chromium.GPU
        name, error = chromium.probe_renderer(binary, renderer)
        if name:
            assessment.device.name = name
            assessment.device.software = looks_software(name)
        else:
            assessment.usable = False
            assessment.reasons.append(error)
    return _row("WebGL", assessment, request, scope="Unity WebGL builds (headless Chromium)")


def _virtual_display_row(request: PlatformRequest, start: bool) -> dict:
    row = {
        "platform": "Linux64",
        "via": VIRTUAL,
        "scope": "Unity Linux64 builds and the builtin player (GLX)",
        "status": "unusable",
        "reasons": [],
        "notes": [],
        "device": None,
        "devices": [],
        "env": {},
        "args": [],
        "instructions": "",
    }
    if not xvfb_path():
        row["reasons"].append("Xvfb is not installed")
        row["instructions"] = apt_line(PACKAGES["xvfb"])
        return row
    if not start:
        row["status"] = "usable"
        row["notes"].append("Xvfb found (not started: --no-start)")
        return row
    size = ScreenSpec(max(request.width, 1280), max(request.height, 1024))
    try:
        with start_xvfb([size]) as display:
            search = find_screen(request.width, request.height, f"{display.display}.0")
            glx = probes.run_probes([f"glx={display.display}.0"])[f"glx={display.display}.0"]
    except PlatformError as exc:
        row["reasons"].append(f"starting Xvfb failed: {exc}")
        return row
    if not search.chosen:
        row["reasons"].extend(search.reasons)
        return row
    if not glx.get("renderer"):
        row["reasons"].append(f"Xvfb started but GLX cannot create a GL context: {glx.get('error')}")
        row["instructions"] = apt_line(PACKAGES["xvfb"])
        return row
    device = Device("glx", "Xvfb", f"{glx['renderer']} on Xvfb", "cpu", software=bool(glx.get("software")))
    device.driver = glx.get("version") or ""
    row.update(status="usable", device=device.to_dict(), devices=[device.to_dict()])
    row["notes"].append(f"checked by starting Xvfb {size.arg()} with GLX, then stopping it")
    return row


def build_report(
    width: int = 300, height: int = 300, x_display: str | None = None, start_xvfb: bool = True
) -> dict:
    request = PlatformRequest(width=width, height=height, x_display=x_display)
    builtin = PlatformRequest(width=width, height=height, x_display=x_display, builtin=True)
    rows = [
        _row(
            "CloudRendering",
            CloudRendering().assess(request),
            request,
            scope="Unity CloudRendering builds, builtin player (Vulkan)",
        ),
        _row(
            "LinuxHeadlessSimulation",
            LinuxHeadlessSimulation().assess(request),
            request,
            scope="Unity 2022+ LinuxHeadlessSimulation builds (CloudRendering's new name; Vulkan)",
        ),
        _row(
            "Linux64", Linux64().assess(request), request, scope="Unity Linux64 builds, builtin player (GLX)"
        ),
    ]
    if request.system == "Linux" and x_display is None:
        rows.append(_virtual_display_row(request, start_xvfb))
        linux64 = next(r for r in rows if r["platform"] == "Linux64" and r["via"] is None)
        if rows[-1]["status"] == "usable" and linux64["status"] != "usable":
            linux64["instructions"] = "nothing to install: unirender starts a virtual display (next row)"
    rows += [
        _row("EGL", EGL().assess(builtin), builtin, scope="builtin reference player only (GL without X)"),
        _row("OSXIntel64", OSXIntel64().assess(request), request, scope="Unity macOS builds"),
        _webgl_row(request),
    ]
    displays = []
    for number in list_display_numbers():
        p = probe_display(number, width, height)
        displays.append({
            "display": f":{number}",
            "socket": p.socket_path,
            "error": p.error,
            "screens": [
                {"display": s.display, "width": s.width, "height": s.height, "depth": s.root_depth,
                 "glx": s.glx, "valid": s.valid, "errors": s.errors}
                for s in p.screens
            ],
        })  # fmt: skip
    vulkan, egl = probes.vulkan(), probes.egl()
    usable = {(r["platform"], r["via"]) for r in rows if r["status"] == "usable"}

    def first_auto(req: PlatformRequest) -> str | None:
        for plat in auto_order(req):
            if (plat.name, None) in usable:
                return plat.name
            if plat.name == "Linux64" and (plat.name, VIRTUAL) in usable:
                return f"Linux64 ({VIRTUAL})"
        return None

    return {
        "request": {"width": width, "height": height, "x_display": x_display, "system": request.system},
        "platforms": rows,
        "x_displays": displays,
        "vulkan": {
            "loader": vulkan.get("loader"),
            "error": vulkan.get("error"),
            "devices": vulkan.get("devices", []),
        },
        "egl": {"library": egl.get("library"), "error": egl.get("error"), "devices": egl.get("devices", [])},
        "auto": {"unity": first_auto(request), "builtin": first_auto(builtin)},
        "mlagents": mlagents_summary(rows),
        "builtin_player": builtin_player_modules(),
        "usable": bool(usable),
    }


STATUS_STYLE = {"usable": "bold green", "unusable": "bold red", "not applicable": "dim"}


def _device_text(device: dict | None) -> str:
    if not device:
        return ""
    kind = "SOFTWARE (CPU)" if device["software"] else f"GPU ({device['kind']})"
    return f"{device['name']}\n{kind}"


def render_report(report: dict, console=None) -> None:
    """A summary table (platform, status, device), then each platform's reasons and notes as wrapped text and
    its fix commands on lines of their own, never wrapped, so that they can be copied and pasted as they are.
    Readable at 80 columns."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console()
    req = report["request"]
    table = Table(title=f"unirender doctor: platforms for {req['width']}x{req['height']} on {req['system']}")
    table.add_column("Platform", no_wrap=True)
    table.add_column("Status", no_wrap=True)
    table.add_column("Device")
    for row in report["platforms"]:
        label = row["platform"] + (f"\n({row['via']})" if row["via"] else "")
        status = f"[{STATUS_STYLE.get(row['status'], '')}]{row['status']}[/]"
        table.add_row(label, status, _device_text(row["device"]))
    console.print(table)
    for row in report["platforms"]:
        _render_details(console, row)

    devices = Table(title="Devices")
    for col in ("API", "Index", "Name", "Type", "Driver / vendor"):
        devices.add_column(col)
    for api in ("vulkan", "egl"):
        for d in report[api]["devices"]:
            kind = "software" if d["software"] else d["kind"]
            devices.add_row(api, str(d["index"]), d["name"], kind, d.get("driver") or d.get("vendor") or "")
        if report[api]["error"]:
            devices.add_row(api, "-", f"[red]{report[api]['error']}[/]", "", "")
    for x in report["x_displays"]:
        if x["error"]:
            devices.add_row("x11", x["display"], f"[red]{x['error']}[/]", "", "")
        for s in x["screens"]:
            ok = "valid" if s["valid"] else "; ".join(s["errors"])
            devices.add_row("x11", s["display"], f"{s['width']}x{s['height']} depth {s['depth']}", "", ok)
    if not report["x_displays"]:
        devices.add_row("x11", "-", "no X display running", "", "")
    console.print()
    console.print(devices)
    auto = report["auto"]
    console.print(f"auto choice: Unity builds -> [bold]{auto['unity'] or 'none'}[/], "
                  f"builtin player -> [bold]{auto['builtin'] or 'none'}[/]")  # fmt: skip
    console.print(escape(report["mlagents"]))
    missing = report["builtin_player"]["missing"]
    if missing:
        console.print(f"The builtin reference player needs the [player] extra ({', '.join(missing)} missing):",
                      markup=False, highlight=False)
        console.print("    pip install 'unirender[player]'", soft_wrap=True, markup=False, highlight=False)
    if not report["usable"]:
        console.print("[bold red]No platform is usable.[/] Run the commands under 'fix' above.")


# What the reference player imports to render (pyproject's [player] extra).
PLAYER_MODULES = ("moderngl", "glcontext", "wgpu", "trimesh")


def builtin_player_modules() -> dict:
    """Whether the reference player's renderer modules are installed (found, not imported: importing wgpu is slow)."""
    from importlib.util import find_spec

    missing = [name for name in PLAYER_MODULES if find_spec(name) is None]
    return {"installed": not missing, "missing": missing}


def mlagents_summary(rows: list[dict]) -> str:
    """What a Unity ML-Agents build needs on this machine. Its camera sensors render only with a graphics device:
    a standard Linux player needs an X display (real, or an Xvfb), a headless build Vulkan; with -nographics
    (vector observations only) cameras silently return blank images."""
    status = {(r["platform"], r["via"]): r["status"] == "usable" for r in rows}
    display = ("an X display (here: yes)" if status.get(("Linux64", None))
               else "an X display (here: none running; Xvfb can provide one)" if status.get(("Linux64", VIRTUAL))
               else "an X display (here: none)")  # fmt: skip
    vulkan = "Vulkan (here: yes)" if status.get(("LinuxHeadlessSimulation", None)) else "Vulkan (here: no)"
    return (f"ML-Agents builds: camera sensors need {display} for a standard Linux player, or {vulkan} for a "
            "LinuxHeadlessSimulation build; vector observations only (-nographics) need neither.")


def _render_details(console, row: dict) -> None:
    from rich.markup import escape
    from rich.padding import Padding

    def indented(markup: str) -> None:  # wrapped lines keep the indent
        console.print(Padding(markup, (0, 0, 0, 2), expand=False))

    name = row["platform"] + (f" ({row['via']})" if row["via"] else "")
    console.print()
    console.print(f"[bold]{escape(name)}[/]: [{STATUS_STYLE.get(row['status'], '')}]{row['status']}[/]")
    indented(f"[dim]for {escape(row['scope'])}[/]")
    details = [*row["reasons"], *row["notes"]]
    if row["env"]:
        details.append("env: " + " ".join(f"{k}={v}" for k, v in row["env"].items()))
    if row["args"]:
        details.append("args: " + " ".join(row["args"]))
    for line in details:
        indented(f"- {escape(line)}")
    instructions = row["instructions"]
    if not instructions:
        return
    indented(f"[yellow]fix:[/] {escape(instructions)}")
    for command in fix_commands(instructions):  # own line, never wrapped: a wrapped command pastes as two
        console.print("    " + command, soft_wrap=True, markup=False, highlight=False)


# The commands inside an instruction text: apt lines (see classes.apt_line) and `backticked` commands.
# A package name may contain dots but not end with one (that is the sentence's full stop).
_PACKAGE = r"[A-Za-z0-9][A-Za-z0-9.+:-]*[A-Za-z0-9+]"
COMMAND_RE = re.compile(rf"`([^`]+)`|(sudo apt-get install -y {_PACKAGE}(?: {_PACKAGE})*)")


def fix_commands(instructions: str) -> list[str]:
    """The shell commands an instruction text names, in order, each once."""
    found = [m.group(1) or m.group(2) for m in COMMAND_RE.finditer(instructions)]
    return list(dict.fromkeys(found))
