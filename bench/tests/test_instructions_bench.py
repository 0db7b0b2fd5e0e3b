"""The instruction detector on the project's labeled set (bench/data/instruction_statements.tsv), run as the
benchmark runs it: precision and recall reach issue 25's goals."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_labeled_set_precision_and_recall_reach_the_goals() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench.instructions", "--labeled"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    m = re.search(r"precision (\d+)/(\d+) = [\d.]+; recall (\d+)/(\d+)", out)
    assert m is not None, out
    tp, detected, found, positives = (int(g) for g in m.groups())
    assert positives >= 150 and len((ROOT / "bench/data/instruction_statements.tsv").read_text().splitlines()) > 300
    assert tp / detected >= 0.95 and found / positives >= 0.85, out
