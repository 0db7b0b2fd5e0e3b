"""The instruction detectors on the project's labeled sets, run as the benchmark runs them.

The development set (bench/data/instruction_statements.tsv) is what the rules were fixed on (and the classifier
experiment is trained on): its numbers are training numbers, held to issue 25's goals. On the frozen test set
(bench/data/instruction_statements_test.tsv, issue 34) the rules and the shipped detector (the rules, then the
classifier) are held to what they measured there (rules: precision 1.000, recall 30/154; rules then classifier:
0.984, 127/154; on the second test set, written blind, bench/data/instruction_statements_test2.tsv: 0.908, 129/164;
bench/RESULTS.md), not to the goals they do not reach: a change that finds less on statements nobody tuned on
fails here. The validation set is scored too (its rows from BEAM only where BEAM is on disk)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_both_sets_are_scored_and_the_rules_hold_their_numbers() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench.instructions", "--labeled", "--test"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    scores: dict[str, tuple[int, int, int, int]] = {}
    for m in re.finditer(
        r"== (.+?) on the (\w+) set .*?\nprecision (\d+)/(\d+) = [\d.]+; recall (\d+)/(\d+)", out, re.S
    ):
        tp, detected, found, positives = (int(g) for g in m.groups()[2:])
        scores[f"{m.group(1)} {m.group(2)}"] = (tp, detected, found, positives)
    assert set(scores) == {
        f"{d} {s}"
        for d in ("pattern", "classifier alone", "classifier")
        for s in ("development", "validation", "test", "test2", "test3")
    }, out
    assert len((ROOT / "bench/data/instruction_statements.tsv").read_text().splitlines()) > 300
    assert len((ROOT / "bench/data/instruction_statements_test.tsv").read_text().splitlines()) > 300
    tp, detected, found, positives = scores["pattern development"]
    assert positives >= 150 and tp / detected >= 0.95 and found / positives >= 0.85, out
    tp, detected, found, positives = scores["pattern test"]
    assert positives >= 150 and tp / detected >= 0.95 and found >= 30, out
    tp, detected, found, positives = scores["classifier test"]
    assert positives >= 150 and tp / detected >= 0.95 and found >= 127, out
    # the blind second test set: held to what the shipped detector measured there once (0.908 / 129 of 164)
    assert len((ROOT / "bench/data/instruction_statements_test2.tsv").read_text().splitlines()) > 400
    tp, detected, found, positives = scores["classifier test2"]
    assert positives >= 160 and tp / detected >= 0.90 and found >= 129, out
    # the blind third test set, scored once for the detector chosen on validation (0.917 / 154 of 204)
    assert len((ROOT / "bench/data/instruction_statements_test3.tsv").read_text().splitlines()) > 470
    tp, detected, found, positives = scores["classifier test3"]
    assert positives >= 200 and tp / detected >= 0.91 and found >= 154, out
