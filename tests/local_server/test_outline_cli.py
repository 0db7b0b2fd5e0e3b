"""`pyramind outline` (issue 25, item 1) against a real store file."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from typer.testing import CliRunner

from local_server.cli import app

runner = CliRunner()
CHAT = [
    ("Ann", "2024-03-01T09:00:00Z", "Hi Bo! I booked a night train to Vienna for the conference."),
    ("Bo", "2024-03-01T09:01:00Z", "Thanks, Ann!"),
    ("Bo", "2024-03-04T10:00:00Z", "My sister adopted a grey cat called Pepper."),
    ("Ann", "2024-03-04T10:02:00Z", "Sure! The conference talk about glaciers was moved to Friday."),
]


def imported(tmp_path: Path) -> dict[str, str]:
    path = tmp_path / "trip.jsonl"
    path.write_text(
        "".join(
            json.dumps({"conversation_id": "trip", "id": f"m{i}", "speaker": s, "created_at": t, "content": c}) + "\n"
            for i, (s, t, c) in enumerate(CHAT)
        )
    )
    e = {"LOCAL_DB_PATH": str(tmp_path / "cli.db"), "COLUMNS": "200"}
    r = runner.invoke(app, ["import", str(path)], env=e)
    assert r.exit_code == 0, r.output
    return e


def test_outline_prints_each_date_then_the_lines_said_on_it(tmp_path: Path) -> None:
    e = imported(tmp_path)
    r = runner.invoke(app, ["outline", "trip"], env=e)
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == [
        "[2024-03-01]",
        "Ann: I booked a night train to Vienna for the conference.",
        "[2024-03-04]",
        "Bo: My sister adopted a grey cat called Pepper.",
        "Ann: The conference talk about glaciers was moved to Friday.",
    ]
    r = runner.invoke(app, ["outline", "trip", "--query", "the cat", "--budget-tokens", "40", "--json"], env=e)
    assert r.exit_code == 0, r.output
    body = json.loads(r.stdout)
    assert [ln["message_id"] for d in body["days"] for ln in d["lines"]] == ["m2"] and body["omitted"] == 2
    assert "2 of 3 lines left out" in runner.invoke(app, ["outline", "trip", "-b", "40"], env=e).stderr


def test_outline_of_an_unknown_conversation_is_one_line_and_exit_1(tmp_path: Path) -> None:
    e = imported(tmp_path)
    r = runner.invoke(app, ["outline", "nope"], env=e)
    assert r.exit_code == 1 and "no conversation with id 'nope'" in r.stderr and "Traceback" not in r.output
    r = runner.invoke(app, ["outline", "trip", "-n", "elsewhere"], env=e)
    assert r.exit_code == 1


def test_upgrade_rebuilds_a_store_without_sentences_once(tmp_path: Path) -> None:
    e = imported(tmp_path)
    with sqlite3.connect(tmp_path / "cli.db") as db:  # what a store written before sentences holds
        db.execute("UPDATE messages SET sentences = NULL")
    r = runner.invoke(app, ["upgrade"], env=e)
    assert r.exit_code == 0, r.output
    assert "1 sources rebuilt on sentences (4 messages split), 0 already current" in r.stdout
    r = runner.invoke(app, ["upgrade"], env=e)
    assert r.exit_code == 0 and "0 sources rebuilt on sentences (0 messages split), 1 already current" in r.stdout
    assert runner.invoke(app, ["outline", "trip"], env=e).stdout.splitlines()[1].startswith("Ann: ")
