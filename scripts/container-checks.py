"""The host side of ``./dev container-test``: checks a running container from outside, over its published port.

    python container-checks.py service URL CONTAINER VOLUME_DIR OWNER BUILD_EXECUTABLE   (token in $UNIRENDER_TOKEN)
    python container-checks.py processes CONTAINER [--expect-player]                 (prints the process table)

Every check raises with what it saw; the exit code is 0 only when all of them passed.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# Run inside the container: every process with its real uid and command line (no ps in a slim image).
PROCESS_TABLE = r"""
import json, os
rows = []
for pid in sorted((p for p in os.listdir('/proc') if p.isdigit()), key=int):
    try:
        uid = next(int(l.split()[1]) for l in open(f'/proc/{pid}/status') if l.startswith('Uid:'))
        cmd = open(f'/proc/{pid}/cmdline', 'rb').read().replace(b'\0', b' ').decode(errors='replace').strip()
        ppid = int(open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[1])
    except (OSError, StopIteration):
        continue  # gone meanwhile
    rows.append({'pid': int(pid), 'ppid': ppid, 'uid': uid, 'cmd': cmd})
print(json.dumps(rows))
"""


def check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)
    print(f"  ok: {message}", flush=True)


def processes(container: str) -> list[dict]:
    out = subprocess.run(["podman", "exec", container, "python3", "-c", PROCESS_TABLE], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    return json.loads(out)


def players(rows: list[dict]) -> list[dict]:
    return [r for r in rows if "unirender-player" in r["cmd"] or "unirender.player" in r["cmd"]
            or "thor-" in r["cmd"].split(" ")[0]]


def readme_client_example(url: str) -> str:
    """The README's Client example, as written, pointed at this container's published port."""
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    example = next(b for b in blocks if "from unirender.client import Client" in b)
    check("http://127.0.0.1:8200" in example, "the README's Client example names http://127.0.0.1:8200")
    return example.replace("http://127.0.0.1:8200", url)


def check_service(url: str, container: str, volume_dir: Path, owner: str, build: str) -> None:
    from unirender.client import Client, ServiceError
    from unirender.jobs.dataset import load_dataset

    print("README's Client example, from the host:", flush=True)
    namespace: dict = {}
    exec(compile(readme_client_example(url), "README.md (Client example)", "exec"), namespace)
    frame = namespace["event"].frame
    check(frame.shape == (300, 300, 3) and frame.dtype == np.uint8 and float(frame.std()) > 1.0,
          f"a 300x300 RGB frame with content (std {float(frame.std()):.1f})")

    client = Client(url)  # token from $UNIRENDER_TOKEN, as the README's example takes it
    print("a user's build mounted read-only and allowed by the config:", flush=True)
    with client.session({"executable": build, "platform": "CloudRendering", "width": 96, "height": 64},
                        scene="FloorPlan1") as env:
        event = env.step("RotateRight")
        check(event.frame.shape == (64, 96, 3) and float(event.frame.std()) > 1.0,
              f"{build} (CloudRendering, lavapipe) stepped: frame {event.frame.shape}")
        rows = processes(container)
        check(bool(players(rows)), f"its player runs in the container: {players(rows)[0]['cmd'][:90]!r}"
              if players(rows) else "a player process in the container")
        root = [r for r in rows if r["uid"] == 0]
        check(not root, f"all {len(rows)} processes run as non-root (uids {sorted({r['uid'] for r in rows})})"
              if not root else f"no root process: {root}")
    try:
        client.session({"executable": str(Path(build).parent / "not-allowed"), "width": 64, "height": 64})
        raise AssertionError("an executable not in allowed_executables was launched")
    except ServiceError as exc:
        check(exc.status == 403 and exc.code == "executable_not_allowed", "an executable not allowed: 403")
    try:
        Client(url, token="wrong").sessions()
        raise AssertionError("a wrong token was accepted")
    except ServiceError as exc:
        check(exc.status == 401, "a wrong token: 401")

    print("a dataset job written to the volume:", flush=True)
    spec = {
        "name": "container_job",
        "environment": {"executable": "builtin", "width": 64, "height": 64},
        "render": {"modalities": ["rgb", "depth"]},
        "episodes": [{"scene": "FloorPlan1_physics", "actions": ["RotateRight"] * 11}],
        "output": {"directory": "container-job", "format": "png", "frames_per_shard": 4},
        "workers": 1,
    }
    status = client.submit_job(spec).wait(timeout=180)
    check(status["state"] == "succeeded", f"job {status['state']}" + (f": {status['errors']}" if status.get("errors") else ""))
    out = volume_dir / owner / "container-job"
    dataset = load_dataset(out)
    records = list(dataset.records)
    check(len(records) == 12 and dataset.images(11)["frame"].shape == (64, 64, 3),
          f"{out}: all {len(records)} frames (12 = reset + 11 actions), readable with load_dataset")
    uid, gid = volume_dir.stat().st_uid, volume_dir.stat().st_gid
    wrong = [p for p in out.rglob("*") if (p.lstat().st_uid, p.lstat().st_gid) != (uid, gid)]
    files = sum(1 for _ in out.rglob("*"))
    check(not wrong, f"all {files} paths owned by the volume's user {uid}:{gid}" if not wrong
          else f"owned by the volume's user {uid}:{gid}, not {[(str(p), p.lstat().st_uid) for p in wrong[:5]]}")


def main() -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="what", required=True)
    s = sub.add_parser("service")
    s.add_argument("url")
    s.add_argument("container")
    s.add_argument("volume_dir", type=Path)
    s.add_argument("owner", help="the token's name: job outputs go to VOLUME_DIR/OWNER/")
    s.add_argument("build")
    p = sub.add_parser("processes")
    p.add_argument("container")
    p.add_argument("--expect-player", action="store_true")
    args = parser.parse_args()
    if args.what == "service":
        check_service(args.url, args.container, args.volume_dir, args.owner, args.build)
    else:
        rows = processes(args.container)
        for r in rows:
            print(f"  {args.container}: pid {r['pid']:>5} ppid {r['ppid']:>5} uid {r['uid']:>5}  {r['cmd'][:100]}")
        if args.expect_player:
            found = players(rows)
            parent = {r["pid"]: r["cmd"] for r in rows}
            check(bool(found), f"{args.container} runs {len(found)} player(s): "
                  + "; ".join(f"pid {r['pid']} {r['cmd'][:60]!r}, child of {parent.get(r['ppid'], '?')[:40]!r}"
                              for r in found))
            root = [r for r in rows if r["uid"] == 0]
            check(not root, f"{args.container}: all {len(rows)} processes non-root" if not root
                  else f"{args.container}: no root process: {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
