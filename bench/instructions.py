"""How well the PatternDetector finds the standing instructions and preferences of BEAM's chats.

BEAM (data not in this repository) has, per chat, `chat.json` (batches of turns of {role, id, content}) and
`probing_questions/probing_questions.json`, whose `instruction_following` and `preference_following` items name
the user messages where the instruction or preference was given (`source_chat_ids`). Recall: the share of those
messages (each counted once) in which the detector finds something. Precision needs a human: `--sample N` prints
N detections drawn at random (seeded) to judge by eye.

    .venv/bin/python -m bench.instructions --data /path/to/beam/chats/100K --chats 1-10 --sample 40

`--labeled` measures precision and recall on the project's own labeled set (bench/data/instruction_statements.tsv,
written for this benchmark, not taken from a dataset): 300+ statements, each labeled instruction, preference,
correction, revocation (positives) or none, said by a user to an assistant or by one person to another (`people`:
the statement is Ann's in a chat with Ben). A statement counts as detected when the PatternDetector returns
anything for it. Goal (issue 25): precision >= 0.95, recall >= 0.85.

    .venv/bin/python -m bench.instructions --labeled [--misses]

Measured on BEAM 100K (rules written on chats 1-10, then run once on 11-20): recall 31/43 (72.1%) on chats 1-10,
32/47 (68.1%) on 11-20, 63/90 (70.0%) on 1-20, with 152 detections in 2,866 user messages. Most misses hold no
statement at all ("Got it! I'll follow your plan", follow-up questions) or only imply it. Precision, 40
detections drawn with seed 0 and read by eye: 39 are standing instructions or preferences; the other, "I
definitely prefer the real world ..." (an answer to a thought experiment), is doubtful.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from models.api import Message
from models.instructions import Detected
from services.instructions import PatternDetector

LABELED = Path(__file__).resolve().parent / "data" / "instruction_statements.tsv"
KEYS = {"instruction_following": "instruction_being_tested", "preference_following": "preference_being_tested"}


def load_chat(folder: Path) -> tuple[list[Message], set[str]]:
    """(the chat's messages in order, ids of the messages where an instruction or preference was given)."""
    batches = json.loads((folder / "chat.json").read_text())
    messages = [
        Message(id=str(m["id"]), role=m["role"], content=m["content"])
        for batch in batches
        for turn in batch["turns"]
        for m in turn
        if m["content"].strip()
    ]
    probes = json.loads((folder / "probing_questions" / "probing_questions.json").read_text())
    sources = {str(i) for key in KEYS for item in probes.get(key, []) for i in item["source_chat_ids"]}
    return messages, sources


def labeled(path: Path = LABELED) -> list[tuple[str, str, str]]:
    """(label, chat, statement) rows of the labeled set, comments skipped."""
    rows = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            label, chat, text = line.split("\t")
            rows.append((label, chat, text))
    return rows


def detected(detector: PatternDetector, chat: str, text: str) -> list[Detected]:
    """What the detector finds in one statement, said to an assistant or (`people`) by Ann to Ben."""
    if chat == "people":
        messages = [Message(id="1", speaker="Ann", content=text), Message(id="2", speaker="Ben", content="Ok.")]
    else:
        messages = [Message(id="1", role="user", content=text)]
    return [d for d in detector.detect(messages) if d.message_id == "1"]


def score_labeled(show_misses: bool = False) -> dict[str, float]:
    """Precision and recall of the PatternDetector on the labeled set; prints a table and, with show_misses, the
    statements it gets wrong."""
    detector = PatternDetector()
    tp = fp = fn = 0
    per_label: dict[str, list[int]] = {}
    for label, chat, text in labeled():
        hit = bool(detected(detector, chat, text))
        positive = label != "none"
        counts = per_label.setdefault(f"{label} ({chat})", [0, 0])
        counts[0] += hit
        counts[1] += 1
        tp += hit and positive
        fp += hit and not positive
        fn += positive and not hit
        if show_misses and hit != positive:
            print(f"{'FALSE POSITIVE' if hit else 'MISS'} [{label}, {chat}] {text}")
    precision = tp / max(tp + fp, 1)
    recall = tp / max(tp + fn, 1)
    for key, (hits, n) in sorted(per_label.items()):
        print(f"{key}: detected {hits}/{n}")
    print(f"precision {tp}/{tp + fp} = {precision:.3f}; recall {tp}/{tp + fn} = {recall:.3f}")
    return {"precision": precision, "recall": recall, "tp": tp, "fp": fp, "fn": fn}


def parse_range(text: str) -> list[int]:
    """`1-10,15` -> [1, ..., 10, 15]."""
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, help="folder of numbered BEAM chats (e.g. chats/100K)")
    ap.add_argument("--labeled", action="store_true", help="precision and recall on the labeled set instead")
    ap.add_argument("--chats", default="1-20", help="chat numbers, e.g. 1-10,15 (default 1-20)")
    ap.add_argument("--sample", type=int, default=0, help="print this many detections drawn at random")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--misses", action="store_true", help="print the source messages where nothing was found")
    args = ap.parse_args()
    if args.labeled:
        score_labeled(args.misses)
        return
    if args.data is None:
        ap.error("--data is required (or --labeled)")

    detector = PatternDetector()
    found_sources = total_sources = user_messages = 0
    detections: list[tuple[int, Detected]] = []
    for n in parse_range(args.chats):
        messages, sources = load_chat(args.data / str(n))
        found = detector.detect(messages, conversation_id=str(n))
        detections.extend((n, d) for d in found)
        hit_ids = {d.message_id for d in found}
        user_messages += sum(m.who == "user" for m in messages)
        total_sources += len(sources)
        found_sources += len(sources & hit_ids)
        if args.misses:
            by_id = {m.id: m for m in messages}
            for i in sorted(sources - hit_ids, key=int):
                print(f"MISS chat {n} message {i}: {by_id[i].content[:300]!r}")
        print(f"chat {n}: {len(sources & hit_ids)}/{len(sources)} source messages found, {len(found)} detections")
    print(
        f"recall {found_sources}/{total_sources} = {found_sources / max(total_sources, 1):.1%}; "
        f"{len(detections)} detections in {user_messages} user messages"
    )
    rng = random.Random(args.seed)
    for n, d in rng.sample(detections, min(args.sample, len(detections))):
        print(f"[chat {n} msg {d.message_id} {d.kind} {d.rule}] {d.statement[:220]!r}")


if __name__ == "__main__":
    main()
