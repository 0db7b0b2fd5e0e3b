"""The `pyramind` CLI against a real store file: import each format, query, show, stats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from local_server.cli import app
from services.importers import detect_format, read

runner = CliRunner()


def env(tmp_path: Path) -> dict[str, str]:
    return {"LOCAL_DB_PATH": str(tmp_path / "cli.db"), "COLUMNS": "200"}


def chatgpt_export(path: Path) -> Path:
    def node(nid: str, parent: str | None, children: list[str], role: str | None, text: str | None, t: float) -> dict:
        msg = (
            None
            if role is None
            else {
                "id": nid,
                "author": {"role": role},
                "create_time": t,
                "content": {"content_type": "text", "parts": [text]},
            }
        )
        return {"id": nid, "parent": parent, "children": children, "message": msg}

    mapping = {
        "root": node("root", None, ["sys"], None, None, 0),
        "sys": node("sys", "root", ["u1"], "system", "You are helpful.", 1),
        "u1": node("u1", "sys", ["a1", "a1b"], "user", "Remind me: my passport expires in March 2027.", 1700000000),
        "a1": node("a1", "u1", [], "assistant", "An old answer that was regenerated away.", 1700000005),
        "a1b": node("a1b", "u1", ["u2"], "assistant", "Noted: your passport expires in March 2027.", 1700000010),
        "u2": node("u2", "a1b", [], "user", "Thanks!", 1700000020),
    }
    path.write_text(json.dumps([{"id": "chat-1", "title": "Passport", "mapping": mapping, "current_node": "u2"}]))
    return path


def test_chatgpt_reader_follows_the_current_branch(tmp_path: Path) -> None:
    path = chatgpt_export(tmp_path / "conversations.json")
    assert detect_format(path) == "chatgpt"
    batch, branch = list(read(path))
    assert batch.conversation_id == "chat-1" and batch.fork is None
    assert [m.id for m in batch.messages] == ["u1", "a1b", "u2"]
    assert [m.role for m in batch.messages] == ["user", "assistant", "user"]
    # the regenerated answer is no longer lost: a fork of chat-1 after u1
    assert (branch.conversation_id, branch.fork) == ("chat-1~a1", ("chat-1", "u1"))
    assert [m.id for m in branch.messages] == ["a1"]
    assert (batch.title, branch.title) == ("Passport", "Passport")  # ChatGPT's title, kept for the branch too


def test_chatgpt_branches_become_forks_and_bad_mappings_are_named(tmp_path: Path) -> None:
    path = chatgpt_export(tmp_path / "conversations.json")
    data = json.loads(path.read_text())
    mapping = data[0]["mapping"]
    mapping["a1"]["children"] = ["u3"]  # the old branch goes on, then branches again
    mapping["u3"] = {
        "id": "u3",
        "parent": "a1",
        "children": ["a3", "a3b"],
        "message": {
            "id": "u3",
            "author": {"role": "user"},
            "create_time": 1700000030,
            "content": {"content_type": "text", "parts": ["So the passport is fine for my trip to Peru?"]},
        },
    }
    for nid, text in (("a3", "Yes, it is valid for Peru."), ("a3b", "Peru needs six months of validity: fine.")):
        mapping[nid] = {
            "id": nid,
            "parent": "u3",
            "children": [],
            "message": {
                "id": nid,
                "author": {"role": "assistant"},
                "create_time": 1700000040,
                "content": {"content_type": "text", "parts": [text]},
            },
        }
    path.write_text(json.dumps(data))
    batches = list(read(path))
    assert [(b.conversation_id, b.fork, [m.id for m in b.messages]) for b in batches] == [
        ("chat-1", None, ["u1", "a1b", "u2"]),
        ("chat-1~a1", ("chat-1", "u1"), ["a1", "u3", "a3b"]),
        ("chat-1~a3", ("chat-1~a1", "u3"), ["a3"]),
    ]
    e = env(tmp_path)
    res = runner.invoke(app, ["import", str(path)], env=e)
    assert res.exit_code == 0, res.output
    from datastore.factory import open_memory
    from datastore.read.lineage import fork_info, lineage
    from models.settings import Settings

    memory = open_memory(Settings(_env_file=None, local_db_path=tmp_path / "cli.db"))
    try:
        assert (fork_info(memory.storage, "default", "chat-1~a3") or {}).get("parent_id") == "chat-1~a1"
        assert [sid for sid, _ in lineage(memory.storage, "default", "chat-1~a3")] == [
            "chat-1~a3",
            "chat-1~a1",
            "chat-1",
        ]
    finally:
        memory.close()
    assert runner.invoke(app, ["import", str(path)], env=e).exit_code == 0  # again: nothing new, no error

    mapping["u1"]["parent"] = "u2"  # a cycle: u1 -> u2 -> a1b -> u1
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="cyclic at node"):
        list(read(path))
    other = {**e, "LOCAL_DB_PATH": str(tmp_path / "other.db")}
    res = runner.invoke(app, ["import", str(path)], env=other)
    assert res.exit_code == 2 and "cyclic" in res.output
    data[0]["mapping"] = ["not", "an", "object"]
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="mapping"):
        list(read(path))


def test_an_imported_branch_sees_the_messages_before_it_departs(tmp_path: Path) -> None:
    """The regenerated answer a1 is a fork of chat-1 after u1, whose one chunk straddles that
    point; the branch sees u1 (the question it answers) and never the main path's later a1b and u2."""
    e = env(tmp_path)
    assert runner.invoke(app, ["import", str(chatgpt_export(tmp_path / "c.json"))], env=e).exit_code == 0
    r = runner.invoke(
        app,
        ["query", "passport expires March 2027 regenerated", "--conversation-id", "chat-1~a1", "--json", "-k", "10"],
        env=e,
    )
    assert r.exit_code == 0, r.output
    results = json.loads(r.stdout)["results"][0]["results"]
    seen = {m for x in results for m in x["message_ids"]}
    assert seen == {"u1", "a1"}
    assert any("Remind me: my passport" in x["text"] for x in results)
    assert not any("Noted:" in x["text"] or "Thanks!" in x["text"] for x in results)


def test_conversations_lists_ids_titles_counts_and_time_ranges(tmp_path: Path) -> None:
    """`pyramind conversations` lists what was imported with ChatGPT's titles."""
    e = env(tmp_path)
    assert runner.invoke(app, ["conversations"], env=e).exit_code == 1  # no store yet: refused, not created
    assert runner.invoke(app, ["import", str(chatgpt_export(tmp_path / "c.json"))], env=e).exit_code == 0
    r = runner.invoke(app, ["conversations"], env=e)
    assert r.exit_code == 0, r.output
    row = next(line for line in r.stdout.splitlines() if "chat-1 " in line)
    assert "Passport" in row and " 3 " in row and "2023-11-14 22:13" in row and "2023-11-14 22:13" in row
    assert any("chat-1~a1" in line and "Passport" in line for line in r.stdout.splitlines())
    r = runner.invoke(app, ["conversations", "--json"], env=e)
    listed = {c["id"]: c for c in json.loads(r.stdout)}
    assert listed["chat-1"]["title"] == "Passport" and listed["chat-1"]["message_count"] == 3
    assert listed["chat-1~a1"]["message_count"] == 1
    r = runner.invoke(app, ["conversations", "-n", "elsewhere"], env=e)
    assert r.exit_code == 0 and "chat-1" not in r.stdout


def test_jsonl_reader_groups_by_conversation_and_names_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "msgs.jsonl"
    path.write_text(
        '{"conversation_id": "a", "speaker": "Ann", "content": "hi"}\n'
        '{"conversation_id": "b", "role": "user", "content": "yo", "created_at": "2024-01-01T10:00:00"}\n'
        '{"speaker": "Cy", "content": "no id"}\n'
    )
    assert [(b.conversation_id, len(b.messages)) for b in read(path)] == [("a", 1), ("b", 1), ("msgs", 1)]
    path.write_text('{"content": ""}\n')
    with pytest.raises(ValueError, match="msgs.jsonl:1"):
        list(read(path))


def test_import_query_show_stats(tmp_path: Path, locomo: list[dict]) -> None:
    sample = dict(locomo[0])
    conv = {
        k: v for k, v in sample["conversation"].items() if not k.startswith("session_") or int(k.split("_")[1]) <= 8
    }
    slice_path = tmp_path / "locomo_slice.json"
    slice_path.write_text(json.dumps([{**sample, "conversation": conv}]))
    r = runner.invoke(app, ["import", str(slice_path)], env=env(tmp_path))
    assert r.exit_code == 0, r.output
    n = sum(len(conv[f"session_{i}"]) for i in range(1, 9))
    assert f"{n} messages in 1 conversations" in r.output

    r = runner.invoke(app, ["import", str(chatgpt_export(tmp_path / "c.json"))], env=env(tmp_path))
    # the main path (u1, a1b, u2) and the regenerated answer a1 as a fork of it (services/importers.py)
    assert r.exit_code == 0 and "4 messages in 2 conversations" in r.output

    r = runner.invoke(app, ["stats"], env=env(tmp_path))
    stats = json.loads(r.stdout)
    assert stats["sources"] == 3 and stats["messages"] == n + 4 and stats["L3"] >= 1

    r = runner.invoke(app, ["query", "when does my passport expire", "--json", "-k", "3"], env=env(tmp_path))
    top = json.loads(r.stdout)["results"][0]["results"][0]
    assert top["conversation_id"] == "chat-1" and "March 2027" in top["text"]

    r = runner.invoke(app, ["query", "support group", "--level", "3", "--json"], env=env(tmp_path))
    l3 = json.loads(r.stdout)["results"][0]["results"][0]
    r = runner.invoke(app, ["show", l3["id"]], env=env(tmp_path))
    assert r.exit_code == 0
    assert r.output.count("L2 ") == 5 and r.output.count("L1 ") == 25

    r = runner.invoke(app, ["show", "nope"], env=env(tmp_path))
    assert r.exit_code == 1 and "no memory" in r.output


def test_import_rejects_unknown_files(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"hello": 1}')
    r = runner.invoke(app, ["import", str(bad)], env=env(tmp_path))
    assert r.exit_code == 2 and "cannot" in r.output


def test_serve_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    r = runner.invoke(app, ["serve"], env={**env(tmp_path), "BEARER_TOKEN": "", "AUTH": "bearer"})
    assert r.exit_code != 0


def test_commands_print_the_store_and_read_commands_refuse_a_missing_file(tmp_path: Path) -> None:
    """Every command says which store it uses; a read command never creates an empty
    pyramind.db in the current folder, and `--db` picks the file."""
    missing = tmp_path / "nowhere.db"
    for args in (["stats"], ["query", "anything"], ["show", "some-id"]):
        r = runner.invoke(app, [*args, "--db", str(missing)], env={"COLUMNS": "200"})
        assert r.exit_code == 1, r.output
        assert f"no store at {missing}" in r.stderr and "--db" in r.stderr
        assert "Traceback" not in r.output
    assert not missing.exists()
    path = tmp_path / "msgs.jsonl"
    path.write_text('{"conversation_id": "a", "speaker": "Ann", "content": "My bike is the red one."}\n')
    r = runner.invoke(app, ["import", str(path), "--db", str(tmp_path / "made.db")], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert f"store: local SQLite file {tmp_path / 'made.db'}" in r.stderr
    r = runner.invoke(app, ["stats", "--db", str(tmp_path / "made.db")], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and json.loads(r.stdout)["messages"] == 1
    assert f"store: local SQLite file {tmp_path / 'made.db'}" in r.stderr


@pytest.mark.parametrize("content", [b"this is not a database, only text" * 100, None])
def test_a_store_that_cannot_be_opened_is_one_line(tmp_path: Path, content: bytes | None) -> None:
    bad = tmp_path / "bad.db"
    if content is None:
        bad.mkdir()  # a folder where the file should be
    else:
        bad.write_bytes(content)
    r = runner.invoke(app, ["stats", "--db", str(bad)], env={"COLUMNS": "200"})
    assert r.exit_code == 1
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines[0].startswith("store: ") and len(lines) == 2, r.stderr
    assert lines[1].startswith(f"cannot open the store (local SQLite file {bad})") and "Traceback" not in r.output


def test_query_takes_a_mode_and_shows_date_and_conversation(tmp_path: Path) -> None:
    r = runner.invoke(app, ["import", str(chatgpt_export(tmp_path / "c.json"))], env=env(tmp_path))
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["query", "passport expiry", "--mode", "dense", "-k", "2"], env=env(tmp_path))
    assert r.exit_code == 0, r.output
    assert "date" in r.output and "conversation" in r.output
    assert "2023-11-14" in r.output and "chat-1" in r.output  # the chat's date and its conversation id
    r = runner.invoke(app, ["query", "passport", "--mode", "fuzzy"], env=env(tmp_path))
    assert r.exit_code != 0 and "--mode" in r.output


def test_a_bad_setting_is_one_line(tmp_path: Path) -> None:
    r = runner.invoke(app, ["stats", "--db", str(tmp_path / "x.db")], env={"MAX_TOP_K": "lots"})
    assert r.exit_code == 2
    assert r.stderr.strip().startswith("pyramind: bad setting MAX_TOP_K:") and "Traceback" not in r.output


def test_forget_dry_run_then_for_real(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    lines = [
        {
            "conversation_id": "c",
            "speaker": "Ann" if i % 2 else "Bob",
            "id": f"m{i}",
            "content": f"Point {i}: we compared {i} kinds of tea and coffee beans at length today.",
            "created_at": f"2024-01-01T09:{i:02d}:00Z",
        }
        for i in range(40)
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines))
    e = env(tmp_path)
    assert runner.invoke(app, ["import", str(path)], env=e).exit_code == 0
    # with the policy off, a dry run reports what it would do (nothing) and says why; forgetting for real refuses
    off = runner.invoke(app, ["forget", "--dry-run"], env=e)
    assert off.exit_code == 0, off.output
    assert "policy is off" in off.stderr and "FORGET_MAX_NODES" in off.stderr
    assert "would forget 0" in off.stdout
    off = runner.invoke(app, ["forget", "--dry-run", "--json"], env=e)
    assert off.exit_code == 0, off.output
    report = json.loads(off.stdout)[0]
    assert (report["enabled"], report["forgotten"], report["l1_before"] > 2) == (False, [], True)
    off = runner.invoke(app, ["forget"], env=e)
    assert off.exit_code == 1 and "policy is off" in off.stderr
    e["FORGET_MAX_NODES"] = "2"
    dry = runner.invoke(app, ["forget", "--dry-run", "--json"], env=e)
    assert dry.exit_code == 0, dry.output
    report = json.loads(dry.stdout)[0]
    assert report["dry_run"] and report["forgotten"] and report["l1_before"] > 2
    real = runner.invoke(app, ["forget", "--json"], env=e)
    assert real.exit_code == 0, real.output
    assert json.loads(real.stdout)[0]["l1_after"] <= 2


def test_export_then_import_into_a_fresh_store(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    lines = [
        {
            "conversation_id": "c",
            "speaker": "Ann" if i % 2 else "Bob",
            "id": f"m{i}",
            "content": f"Point {i}: we compared {i} kinds of tea and coffee beans at length today.",
            "created_at": f"2024-01-01T09:{i:02d}:00Z",
        }
        for i in range(30)
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines))
    e = env(tmp_path)
    assert runner.invoke(app, ["import", str(path)], env=e).exit_code == 0
    dump = runner.invoke(app, ["export"], env=e)
    assert dump.exit_code == 0, dump.output
    (tmp_path / "dump.jsonl").write_text(dump.stdout)
    fresh = {**e, "LOCAL_DB_PATH": str(tmp_path / "fresh.db")}
    res = runner.invoke(app, ["import", str(tmp_path / "dump.jsonl")], env=fresh)
    assert res.exit_code == 0 and "restored 1 sources, 30 messages" in res.output, res.output
    again = runner.invoke(app, ["export"], env=fresh)
    assert again.stdout == dump.stdout  # the restored store exports the same dump, line by line
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join(dump.stdout.splitlines()[:-2]))
    other = {**e, "LOCAL_DB_PATH": str(tmp_path / "other.db")}
    res = runner.invoke(app, ["import", str(broken)], env=other)
    assert res.exit_code == 2 and "cut short" in res.output and "line" in res.output
    assert not list(tmp_path.glob("other.db*"))  # the refused import leaves no store behind (it created it)
    res = runner.invoke(app, ["import", str(broken)], env=fresh)  # a store that was there stays as it was
    assert res.exit_code == 2 and runner.invoke(app, ["export"], env=fresh).stdout == dump.stdout


def test_query_prints_ids_whole_at_80_columns_and_show_prints_a_node_once(tmp_path: Path) -> None:
    """Issue 27, item 5: at 80 columns `pyramind query` cut ids, so they could not be pasted into `pyramind show`;
    `pyramind show` printed the node twice (its header, then the same node as the root of its tree)."""
    narrow = {**env(tmp_path), "COLUMNS": "80"}
    path = tmp_path / "msgs.jsonl"
    cid = "a-conversation-id-long-enough-to-make-every-node-id-wider-than-the-table-cell-" + "x" * 20
    lines = [
        {"conversation_id": cid, "speaker": "Ann", "content": f"My bike number {i} is the red one."} for i in range(3)
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    assert runner.invoke(app, ["import", str(path)], env=narrow).exit_code == 0
    r = runner.invoke(app, ["query", "red bike", "--json"], env=narrow)
    ids = [x["id"] for x in json.loads(r.stdout)["results"][0]["results"]]
    assert ids
    r = runner.invoke(app, ["query", "red bike"], env=narrow)
    assert r.exit_code == 0, r.output
    printed = r.stdout.splitlines()
    for node_id in ids:
        assert any(node_id in line for line in printed), (node_id, r.stdout)  # whole, on one line: pasteable
    r = runner.invoke(app, ["show", ids[0]], env=narrow)
    assert r.exit_code == 0, r.output
    assert r.stdout.count(ids[0]) == 1 and r.stdout.count("My bike number") == 3


def test_help_reads_cleanly() -> None:
    """`pyramind --help` showed a `<bool>` type beside every flag and `{conversation_id}` on a usage line (typer
    0.29's defaults); a command's summary was cut where its docstring's lines break."""
    helps = {"pyramind": runner.invoke(app, ["--help"], env={"COLUMNS": "200"})}
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    assert {"serve", "import", "outline", "forget", "export"} <= set(commands)
    for name in commands:  # every command, those added later too
        helps[name] = runner.invoke(app, [name, "--help"], env={"COLUMNS": "200"})
    for name, r in helps.items():
        assert r.exit_code == 0, (name, r.output)
        assert "<bool>" not in r.output, (name, r.output)
        usage = next(ln for ln in r.output.splitlines() if "Usage:" in ln)
        assert "{" not in usage and "}" not in usage, (name, usage)
    assert "outline [OPTIONS] CONVERSATION_ID" in helps["outline"].output
    assert "import [OPTIONS] PATH" in helps["import"].output
    assert "--json  " in helps["outline"].output  # a flag: no type after it
    assert "<int range>" in helps["outline"].output  # an option taking a value keeps its type
    # a summary on one line: "... a progress bar; or restore a `pyramind export` dump exactly ..."
    assert "or restore a `pyramind export` dump exactly" in helps["pyramind"].output
    assert "forgetting for real is refused (exit 1)" in helps["forget"].output  # a later paragraph, too


def test_import_user_names_whose_memory_a_chat_between_people_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`pyramind import --user Jon`: of a chat between Jon and Gina only Jon's preferences are kept; without
    `--user`, none (neither Gina's encouragement nor Jon's diet)."""
    from local_server.cli_common import open_store, settings_for

    lines = [
        {"speaker": "Gina", "content": "And remember, I'm always here for you."},
        {"speaker": "Jon", "content": "Thanks. I'm vegetarian, keep that in mind."},
        {"speaker": "Gina", "content": "Noted, no steak then."},
    ]
    for name, extra in (("nobody", []), ("jon", ["--user", "Jon"])):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        r = runner.invoke(app, ["import", str(path), *extra], env=env(tmp_path))
        assert r.exit_code == 0, r.output
    monkeypatch.setenv("LOCAL_DB_PATH", str(tmp_path / "cli.db"))
    store = open_store(settings_for(None))
    try:
        found = store.instructions.list("default").instructions
    finally:
        store.close()
    assert [(i.conversation_id, i.speaker, i.statement) for i in found] == [
        ("jon", "Jon", "I'm vegetarian, keep that in mind.")
    ]
