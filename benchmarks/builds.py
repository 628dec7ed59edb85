"""The build store's targets (issue 33), side by side in one run, on one synthetic build:

* ``add`` of a build folder and of its zip vs the floor of doing it by hand on the same bytes: ``sha256sum`` +
  ``cp -r`` (folder); ``unzip`` + ``sha256sum`` (zip). Goal: within 1.5x.
* adding the same build again: at most 5 % of the first add's time.
* a second build sharing 90 % of its files: the store grows by at most 15 % of its size.
* resolving a reference at launch (``resolve_build("name:tag")``, what every Controller does): at most 5 ms.

The synthetic build is laid out as Unity writes one (``Game.x86_64``, ``UnityPlayer.so``, ``Game_Data/`` with
``sharedassets*.assets`` of random bytes and 1,000 small files). ``--size-mb`` (default 1024) sets its size.
Rounds interleave the contenders; the page cache is warm for all of them (the source was just written).

    PYTHONPATH=src python benchmarks/builds.py [--size-mb 1024] [--rounds 3]

``--distribute``: builds reaching render hosts instead (a loopback service, two Ray nodes: builds_distribute.py).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from unirender.builds import BuildStore, resolve_build

SMALL_FILES = 1000


def make_build(root: Path, size_mb: int, seed: int = 0, changed_share: float = 0.0) -> Path:
    """A Unity-style build of ``size_mb`` MiB; ``changed_share`` of its large files differ from seed 0's."""
    data = root / "Game_Data"
    (data / "Managed").mkdir(parents=True)
    (root / "Game.x86_64").write_bytes(b"\x7fELF" + bytes(4096))
    (root / "Game.x86_64").chmod(0o755)
    (root / "UnityPlayer.so").write_bytes(b"\x7fELF" + os.urandom(1 << 20))
    (data / "globalgamemanagers").write_bytes(b"\x00" * 20 + b"2022.3.10f1\x00" + bytes(4000))
    for i in range(SMALL_FILES):
        (data / "Managed" / f"Assembly{i}.dll").write_bytes(i.to_bytes(4, "little") * 1024)
    large = 100
    per_file = (size_mb << 20) // large
    changed = int(large * changed_share)
    for i in range(large):
        # Random bytes per (file, seed), made fast enough to leave the run to what is measured.
        content = random.Random(i * 1000 + (seed if i < changed else 0)).randbytes(per_file)
        (data / f"sharedassets{i}.assets").write_bytes(content)
    return root


def timed(fn, *args) -> float:
    started = time.perf_counter()
    fn(*args)
    return time.perf_counter() - started


def by_hand_folder(source: Path, target: Path) -> None:
    files = [str(p) for p in source.rglob("*") if p.is_file()]
    subprocess.run(["sha256sum", *files], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cp", "-r", str(source), str(target)], check=True)


def by_hand_zip(archive: Path, target: Path) -> None:
    subprocess.run(["unzip", "-q", str(archive), "-d", str(target)], check=True)
    files = [str(p) for p in target.rglob("*") if p.is_file()]
    subprocess.run(["sha256sum", *files], check=True, stdout=subprocess.DEVNULL)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--distribute", action="store_true", help="a build to a service and two Ray nodes (issue 46)")
    args = parser.parse_args()
    if args.distribute:
        sys.path.insert(0, str(Path(__file__).parent))
        from builds_distribute import run

        return run(args.size_mb, args.rounds, make_build)
    with tempfile.TemporaryDirectory(prefix="unirender-bench-builds-") as tmp:
        tmp = Path(tmp)
        started = time.perf_counter()
        source = make_build(tmp / "Game", args.size_mb)
        archive = tmp / "Game.zip"
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as bundle:  # Unity's assets barely deflate
            for path in sorted(source.rglob("*")):
                bundle.write(path, path.relative_to(source).as_posix())
        size = sum(p.stat().st_size for p in source.rglob("*") if p.is_file())
        print(f"synthetic build: {size / 2**20:.0f} MiB in {sum(1 for _ in source.rglob('*'))} entries "
              f"(made in {time.perf_counter() - started:.1f} s)", flush=True)
        rows: dict[str, list[float]] = {k: [] for k in ("hand_folder", "add_folder", "hand_zip", "add_zip", "again")}
        for r in range(args.rounds):
            work = tmp / f"round{r}"
            work.mkdir()
            rows["hand_folder"].append(timed(by_hand_folder, source, work / "copy"))
            shutil.rmtree(work / "copy")
            store = BuildStore(work / "store-folder")
            rows["add_folder"].append(timed(store.add, source, "game:v1"))
            rows["again"].append(timed(store.add, source, "game:v1"))
            store.close()
            rows["hand_zip"].append(timed(by_hand_zip, archive, work / "unzipped"))
            zstore = BuildStore(work / "store-zip")
            rows["add_zip"].append(timed(zstore.add, archive))
            zstore.close()
            subprocess.run(["rm", "-rf", str(work)], check=True)  # the stores' files are read-only
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in rows.items()), flush=True)
        med = {k: statistics.median(v) for k, v in rows.items()}
        # Dedup: a second commit of the same game with 10 % of its large files changed.
        second = make_build(tmp / "Game2", args.size_mb, seed=1, changed_share=0.1)
        store = BuildStore(tmp / "store-dedup")
        store.add(source, name="game:v1")
        before = store.disk_usage()
        second_build = store.add(second, name="game:v2")
        growth = store.disk_usage() - before
        # Resolving a reference at launch.
        for _ in range(20):
            resolve_build("game:v2", store=store)
        latencies = []
        for _ in range(500):
            t = time.perf_counter()
            resolve_build("game:v2", store=BuildStore(store.root))  # a fresh store object, as a new process has
            latencies.append(time.perf_counter() - t)
        store.close()
        subprocess.run(["rm", "-rf", str(tmp / "store-dedup")], check=True)
    print()
    print("| measure | median | target | verdict |")
    print("|---|---|---|---|")
    ratio_folder = med["add_folder"] / med["hand_folder"]
    ratio_zip = med["add_zip"] / med["hand_zip"]
    again = med["again"] / med["add_folder"]
    share = growth / second_build.size
    p50, p99 = statistics.median(latencies) * 1e3, sorted(latencies)[int(len(latencies) * 0.99)] * 1e3
    print(f"| add folder vs sha256sum + cp -r | {med['add_folder']:.2f} s vs {med['hand_folder']:.2f} s = "
          f"{ratio_folder:.2f}x | <= 1.5x | {'met' if ratio_folder <= 1.5 else 'NOT met'} |")
    print(f"| add zip vs unzip + sha256sum | {med['add_zip']:.2f} s vs {med['hand_zip']:.2f} s = {ratio_zip:.2f}x "
          f"| <= 1.5x | {'met' if ratio_zip <= 1.5 else 'NOT met'} |")
    print(f"| the same build again | {med['again']:.3f} s = {again:.1%} of the first add | <= 5 % | "
          f"{'met' if again <= 0.05 else 'NOT met'} |")
    print(f"| second build sharing 90 % of its files | store grew {growth / 2**20:.0f} MiB = {share:.1%} of its "
          f"{second_build.size / 2**20:.0f} MiB | <= 15 % | {'met' if share <= 0.15 else 'NOT met'} |")
    print(f"| resolve a reference at launch | p50 {p50:.3f} ms, p99 {p99:.3f} ms | <= 5 ms | "
          f"{'met' if p99 <= 5 else 'NOT met'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
