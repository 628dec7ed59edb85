#!/usr/bin/env python3
"""Write tests/slow_tests.txt from a ``--durations=0`` run of the fast subset (tests/fixtures/suite_marks.py):

    ./dev test-fast --durations=0 | tee /tmp/fast.log
    python scripts/slow-tests.py /tmp/fast.log

Every test whose setup + call + teardown took THRESHOLD_S or more is listed, except those a file or doc-block rule
marks already; tests listed before stay listed (a run on a quieter machine does not unmark them: remove a line by
hand when a test got faster)."""

from __future__ import annotations

import collections
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from fixtures.suite_marks import SLOW_FILES, SLOW_LIST, THRESHOLD_S, measured_slow  # noqa: E402

DURATION = re.compile(r"^([\d.]+)s (call|setup|teardown)\s+(\S+)")


def main(log: str) -> None:
    spent: collections.Counter[str] = collections.Counter()
    for line in Path(log).read_text().splitlines():
        match = DURATION.match(line)
        if match:
            spent[match.group(3)] += float(match.group(1))
    slow = {node for node, seconds in spent.items() if seconds >= THRESHOLD_S
            and "test_docs_blocks.py" not in node and not any(node.startswith(p) for p in SLOW_FILES)}
    slow |= measured_slow()
    header = [f"# Tests of the fast subset that took {THRESHOLD_S:g} s or more (setup + call + teardown) in a",
              "# --durations=0 run; ./dev test-fast leaves them out. Written by scripts/slow-tests.py",
              "# (tests/fixtures/suite_marks.py says how the list is used)."]
    SLOW_LIST.write_text("\n".join(header + sorted(slow)) + "\n")
    print(f"{len(slow)} tests in {SLOW_LIST.relative_to(REPO)}")


if __name__ == "__main__":
    main(sys.argv[1])
