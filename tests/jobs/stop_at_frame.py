"""Runs a job and holds it still at a chosen frame, for a test to SIGKILL it there (tests/jobs/test_chunks.py).

``python stop_at_frame.py JOB.yaml FRAME CHUNK READY``: renders JOB.yaml; when the player is about to render frame
FRAME (0-based) of a pose episode, it waits until the writer has committed the whole chunks before it, writes READY
and blocks for good. The test kills the process once READY exists: the kill lands at a known frame with a known
commit log, whatever the machine's load (waiting for frame files to appear raced the job to its end).
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from unirender.controller import Controller
from unirender.jobs import render
from unirender.jobs.chunks import CommitLog


def main() -> None:
    job, frame, chunk, ready = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    import yaml

    log = CommitLog(Path(yaml.safe_load(job.read_text())["output"]["directory"]) / ".unirender-job" / "commits.log")
    whole = frame // chunk * chunk  # frames in the chunks sealed before FRAME

    class StopsAtFrame(Controller):
        teleports = 0

        def step(self, action=None, **kwargs):
            if isinstance(action, dict) and action.get("action") == "TeleportFull":
                if self.teleports == frame:
                    # The writer commits on its own thread: wait for it (it must get there), then hold still.
                    while sum(c.frames for c in log.read().values()) < whole:
                        time.sleep(0.01)
                    ready.write_text(str(whole))
                    threading.Event().wait()
                self.teleports += 1
            return super().step(action, **kwargs)

    render(job, player_factory=lambda kwargs: StopsAtFrame(**kwargs))


if __name__ == "__main__":
    main()
