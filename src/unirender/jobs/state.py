"""Resume bookkeeping under ``<out>/.unirender-job/``: the job's identity, its lock, its commit log.

Which chunks of which units are committed lives in the commit log (:mod:`unirender.jobs.chunks`); a resumed
job redoes every chunk without a line there, rewriting any files a killed attempt left with the same bytes, so
nothing is duplicated or torn. ``job.json`` holds the spec's content hash: resuming into a directory that
holds a different job is refused. A ``flock`` keeps two runs from writing one directory at the same time (the
kernel drops it when a run dies, even by SIGKILL).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from unirender.errors import UnirenderError
from unirender.jobs.atomic import sweep_temp_files, write_atomic
from unirender.jobs.chunks import COMMIT_LOG, META_DIR, Commit, CommitLog
from unirender.jobs.encoding import dumps_json
from unirender.jobs.writers import FRAMES_DIR, SHARDS_DIR
from unirender.spec.models import JobSpec

log = logging.getLogger(__name__)

STATE_DIR = ".unirender-job"
MANIFEST = "manifest.json"
METADATA = "metadata.jsonl"
CONTACT_SHEET = "contact_sheet.png"
ANNOTATIONS_DIR = "annotations"
VIDEOS_DIR = "videos"  # output.video's files (jobs.episode_videos), and `unirender video`'s
PLAYER_INFO = "player.json"  # in STATE_DIR
# What a job owns in its output directory; --no-resume removes exactly these, nothing else.
OWNED_PATHS = (
    STATE_DIR,
    FRAMES_DIR,
    SHARDS_DIR,
    META_DIR,
    ANNOTATIONS_DIR,
    VIDEOS_DIR,
    MANIFEST,
    METADATA,
    CONTACT_SHEET,
)


class JobError(UnirenderError):
    """A job could not run or finish; the message says which episode failed and why."""


def job_identity(spec, build_digest: str | None) -> dict[str, Any]:
    """What ``job.json`` holds: the spec's hash (over the build's digest when there is one) and the spec."""
    identity = {"spec_hash": spec.content_hash(build_digest), "spec": spec.model_dump(mode="json")}
    if build_digest is not None:
        identity["build_digest"] = build_digest
    return identity


def _same_job_other_build(state, saved: dict, spec, build_digest: str | None, allow_change: bool) -> bool:
    """A saved job whose hash differs only by its build: True when it may go on (a job.json from before build
    digests: upgraded; another build's bytes: with ``allow_change``), BuildChangedError when not, False when it
    is another job altogether."""
    from unirender.builds import BuildChangedError

    saved_digest = saved.get("build_digest")
    if saved_digest is None:
        if saved.get("spec_hash") == spec.content_hash():  # hashed before digests were: the same declaration
            log.info("%s: job.json upgraded with the build digest %s", state.root, build_digest)
            return True
        return False
    if saved.get("spec_hash") != spec.content_hash(saved_digest):
        return False  # other settings changed, not (only) the build
    if not allow_change:
        raise BuildChangedError(
            f"{state.root} was rendered with build {saved_digest}, but this run's build is "
            f"{build_digest or 'the builtin player'}: the bytes behind the build changed, and resuming would mix "
            "frames of two builds. Use another output directory, --no-resume to start over, or "
            "--allow-build-change to go on knowingly"
        )
    log.warning("%s: resuming with build %s (the dataset so far was rendered with %s)", state.root,
                build_digest, saved_digest)  # fmt: skip
    changes = state.dir / "build_changes.jsonl"
    with open(changes, "a", encoding="utf-8") as f:
        f.write(dumps_json({"from": saved_digest, "to": build_digest}) + "\n")
    return True


class JobState:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.dir = self.root / STATE_DIR
        self._lock_fd: int | None = None
        self.log = CommitLog(self.dir / COMMIT_LOG)

    @classmethod
    def open(cls, root: str | os.PathLike, spec: JobSpec, *, resume: bool = True, build_digest: str | None = None,
             allow_build_change: bool = False) -> JobState:  # fmt: skip
        """Claim ``root`` for ``spec``: lock it, check (or reset) what a previous run left, sweep temporaries.

        ``build_digest``: the digest of the build's bytes; a resume with other bytes than the run that started
        the dataset is refused (naming both digests) unless ``allow_build_change``."""
        state = cls(Path(root))
        state.root.mkdir(parents=True, exist_ok=True)
        state._lock()
        try:
            saved = state.saved_job()
            if saved is not None and not resume:
                state.clear()
                saved = None
            identity = job_identity(spec, build_digest)
            if saved is not None and saved.get("spec_hash") != identity["spec_hash"]:
                if not _same_job_other_build(state, saved, spec, build_digest, allow_build_change):
                    raise JobError(
                        f"{state.root} holds a different job (spec hash {str(saved.get('spec_hash'))[:12]}, this "
                        f"spec {identity['spec_hash'][:12]}); use another output directory, or --no-resume to "
                        "start over there"
                    )
                saved = None  # upgraded (a manifest from before build digests) or a build change allowed
            state.log.repair()
            if saved is None:
                state.dir.mkdir(parents=True, exist_ok=True)
                write_atomic(state.dir / "job.json", dumps_json(identity).encode())
        except BaseException:
            state.close()
            raise
        return state

    def _lock(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dir / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise JobError(f"{self.root} is in use by another running job") from None
        self._lock_fd = fd

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> JobState:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def saved_job(self) -> dict[str, Any] | None:
        try:
            return json.loads((self.dir / "job.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    # What rendered the dataset (player version, platform, device), for the manifest: recorded when the first
    # player is known, before any chunk commits, so that a run killed after its last commit and before its
    # manifest can still write the manifest an uninterrupted run would have (its resume starts no player).
    def record_player(self, info: dict[str, Any]) -> None:
        write_atomic(self.dir / PLAYER_INFO, dumps_json(info).encode())

    def recorded_player(self) -> dict[str, Any]:
        try:
            info = json.loads((self.dir / PLAYER_INFO).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return info if isinstance(info, dict) else {}

    def clear(self) -> None:
        """Remove everything a job writes (and only that); the lock stays held."""
        for name in OWNED_PATHS:
            path = self.root / name
            if name == STATE_DIR:
                for child in path.iterdir() if path.is_dir() else ():
                    if child.name != "lock":
                        shutil.rmtree(child) if child.is_dir() else child.unlink()
            elif path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)

    def commits(self) -> dict[tuple[str, int], Commit]:
        return self.log.read()

    def sweep(self, open_chunk_dirs: list[Path]) -> int:
        """Remove temporaries a killed run left: they can only be in the flat directories (shards, metadata,
        annotations, the root) and in the png directories of chunks that are not committed, so this costs
        O(chunks), not O(files)."""
        dirs = [
            self.root,
            self.dir,
            self.root / SHARDS_DIR,
            self.root / META_DIR,
            self.root / ANNOTATIONS_DIR,
        ]
        return sum(sweep_temp_files(d, recursive=False) for d in dirs + open_chunk_dirs)
