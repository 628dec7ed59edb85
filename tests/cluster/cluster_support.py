"""Shared pieces of the cluster tests: the real reference player at a small size, and process checks.
(A plain module, not a conftest: imported as ``from cluster_support import ...``.)"""

import os
import time

PLAYER = {"executable": "builtin", "width": 64, "height": 64, "platform": "EGL", "server": "fifo"}


def process_gone(pid: int, within: float = 10.0) -> bool:
    """True once ``pid`` no longer runs (a zombie counts as gone: it renders nothing and holds no GPU)."""
    deadline = time.monotonic() + within
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not process_gone(pid, within=0)
