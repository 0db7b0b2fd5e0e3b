"""How well the PatternDetector finds the standing instructions and preferences of BEAM's chats.

BEAM (data not in this repository) has, per chat, `chat.json` (batches of turns of {role, id, content}) and
`probing_questions/probing_questions.json`, whose `instruction_following` and `preference_following` items name
the user messages where the instruction or preference was given (`source_chat_ids`). Recall: the share of those
messages (each counted once) in which the detector finds something. Precision needs a human: `--sample N` prints
N detections drawn at random (seeded) to judge by eye.

    .venv/bin/python -m bench.instructions --data /path/to/beam/chats/100K --chats 1-10 --sample 40

`--labeled` measures precision and recall on the project's labeled sets, all written for this benchmark (not taken
from a dataset), each statement labeled instruction, preference, correction, revocation (positives) or none, said by
a user to an assistant or by one person to another (`people`: the statement is Ann's in a chat with Ben): the
development set (bench/data/instruction_statements.tsv, 307 statements: the rules were fixed on it), the validation
set (bench/data/instruction_statements_validation.tsv: the classifier's design and threshold are chosen on it) and,
with `--test` only, the sets that were written as frozen test sets: bench/data/instruction_statements_test.tsv (337
statements written for issue 34 before the rules were read) and bench/data/instruction_statements_test2.tsv (404
statements written blind on 2026-11-28), both scored and reported blind once and, since the fifth round, part of
the classifier's training data (bench/instruction_classifier.TRAIN_SETS): their scores are training scores
("trained on"); and bench/data/instruction_statements_test3.tsv (475 statements written blind later that day,
scored once at the fifth stop), a development set since: the design and threshold are chosen on it and on
validation; and bench/data/instruction_statements_test4.tsv (444 statements written blind at the sixth stop,
committed before the fifth round, scored once for the detector that round chose: the blind score it is reported
on). The training
set (bench/data/instruction_statements_train.tsv) is not scored here (`python -m bench.instruction_classifier --cv`
cross-validates on the training rows). A statement counts as detected when the detector returns anything for it.
Detectors: `pattern` (PatternDetector, the rules), `classifier alone` (services/instruction_classifier.py with its
shipped weights, behind the rules' rejections) and `classifier` (the rules, plus what that classifier finds).
`--misses` lists each detector's errors. Goal (issues 25 and 34): precision >= 0.95, recall >= 0.85 on a blind set.
`--data ... --detector classifier` runs the classifier on BEAM's chats.

    .venv/bin/python -m bench.instructions --labeled [--misses] [--test] [--data /path/to/beam/chats/100K]

The validation set's statements taken from LoCoMo dev and BEAM chats 16-20 are stored as references to their
messages (`labeled`), read from ../shared/bench/data and from `--data`; without them those rows are left out.

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
import sys
from pathlib import Path

from bench import dataset
from models.api import Message
from models.instructions import Detected
from services.embedding import LocalEmbedder
from services.instruction_classifier import ClassifierDetector
from services.instructions import Detector, PatternDetector

LABELED = Path(__file__).resolve().parent / "data" / "instruction_statements.tsv"
VALIDATION = Path(__file__).resolve().parent / "data" / "instruction_statements_validation.tsv"
TEST = Path(__file__).resolve().parent / "data" / "instruction_statements_test.tsv"
TEST2 = Path(__file__).resolve().parent / "data" / "instruction_statements_test2.tsv"
TEST3 = Path(__file__).resolve().parent / "data" / "instruction_statements_test3.tsv"
TEST4 = Path(__file__).resolve().parent / "data" / "instruction_statements_test4.tsv"
SETS = {
    "development": LABELED,
    "validation": VALIDATION,
    "test": TEST,
    "test2": TEST2,
    "test3": TEST3,
    "test4": TEST4,
}
"""The scored sets; `test` and `test2` are training sets now, `test3` a development set, `test4` blind (the module's
doc)."""
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


def labeled(path: Path = LABELED, beam: Path | None = None) -> list[tuple[str, str, str]]:
    """(label, chat, statement) rows of a labeled set, comments skipped.

    A statement taken from a dataset is kept in the file as a reference, never as its text (the datasets are not
    this project's to commit): `@locomo:<sample_id>:<dia_id>:<start>:<end>` or `@beam:<chat>:<message id>:<start>:
    <end>`, the characters [start, end) of that message, read here from LoCoMo dev (bench/dataset.DATA) and from
    `beam` (BEAM's chats/100K folder). A reference whose data is not on this machine is left out, and the number
    left out is printed to stderr. Raises ValueError for a reference that names no message of the data."""
    rows, missing = [], 0
    texts = _DatasetTexts(beam)
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            label, chat, text = line.split("\t")
            if text.startswith("@"):
                found = texts.of(text[1:])
                if found is None:
                    missing += 1
                    continue
                text = found
            rows.append((label, chat, text))
    if missing:
        print(f"{path.name}: {missing} statements from data not on this machine left out", file=sys.stderr)
    return rows


class _DatasetTexts:
    """Messages of LoCoMo dev and BEAM's user turns by reference (`labeled`), each file read once when first
    needed."""

    def __init__(self, beam: Path | None) -> None:
        self.beam = beam
        self.messages: dict[str, dict[str, str] | None] = {}

    def of(self, ref: str) -> str | None:
        """The text `ref` (`locomo:...` or `beam:...`, see `labeled`) names, None when its data is absent."""
        parts = ref.split(":")  # a LoCoMo dia_id holds a colon itself ("D1:3")
        kind, source, message, start, end = parts[0], parts[1], ":".join(parts[2:-2]), parts[-2], parts[-1]
        key = f"{kind}:{source}"
        if key not in self.messages:
            self.messages[key] = self._load(kind, source)
        held = self.messages[key]
        if held is None:
            return None
        if message not in held:
            raise ValueError(f"{ref}: no such message")
        return held[message][int(start) : int(end)]

    def _load(self, kind: str, source: str) -> dict[str, str] | None:
        if kind == "locomo":
            if not dataset.DATA.exists():
                return None
            for sample in dataset.load():
                if sample["sample_id"] == source:
                    conv = sample["conversation"]
                    return {t["dia_id"]: t["text"] for k in dataset.session_keys(conv) for t in conv[k]}
            return {}
        chat = self.beam / source / "chat.json" if self.beam is not None else None
        if chat is None or not chat.exists():
            return None
        turns = [t for batch in json.loads(chat.read_text()) for turn in batch["turns"] for t in _listed(turn)]
        return {str(t["id"]): t["content"] for t in turns if t.get("role") == "user"}


def _listed(turn: dict | list) -> list[dict]:
    return turn if isinstance(turn, list) else [turn]


def detected(detector: Detector, chat: str, text: str) -> list[Detected]:
    """What the detector finds in one statement, said to an assistant or (`people`) by Ann to Ben, in Ann's
    memory (her conversation's `user`)."""
    if chat == "people":
        messages = [Message(id="1", speaker="Ann", content=text), Message(id="2", speaker="Ben", content="Ok.")]
    else:
        messages = [Message(id="1", role="user", content=text)]
    return [d for d in detector.detect(messages, user="Ann") if d.message_id == "1"]


def score(
    detector: Detector, rows: list[tuple[str, str, str]], show_misses: bool = False, title: str = ""
) -> dict[str, float]:
    """Precision and recall of `detector` on labeled rows; prints a per-label table, one `precision tp/n = p;
    recall tp/n = r` line and, with show_misses, the statements it gets wrong."""
    tp = fp = fn = 0
    per_label: dict[str, list[int]] = {}
    errors: list[str] = []
    for label, chat, text in rows:
        hit = bool(detected(detector, chat, text))
        positive = label != "none"
        counts = per_label.setdefault(f"{label} ({chat})", [0, 0])
        counts[0] += hit
        counts[1] += 1
        tp += hit and positive
        fp += hit and not positive
        fn += positive and not hit
        if hit != positive:
            errors.append(f"{'FALSE POSITIVE' if hit else 'MISS'} [{label}, {chat}] {text}")
    precision = tp / max(tp + fp, 1)
    recall = tp / max(tp + fn, 1)
    print(f"== {title}")
    for key, (hits, n) in sorted(per_label.items()):
        print(f"{key}: detected {hits}/{n}")
    print(f"precision {tp}/{tp + fp} = {precision:.3f}; recall {tp}/{tp + fn} = {recall:.3f}")
    if show_misses:
        print("\n".join(sorted(errors)))
    return {"precision": precision, "recall": recall, "tp": tp, "fp": fp, "fn": fn}


def score_labeled(
    show_misses: bool = False, test: bool = False, beam: Path | None = None
) -> dict[str, dict[str, float]]:
    """The detectors on the labeled sets (development, validation, and the four test sets only when `test`;
    the rules first): the rules, the shipped classifier alone behind the rules' rejections, and the two together;
    {"<detector> <set>": scores}."""
    embedder = LocalEmbedder(threads=1)
    detectors: dict[str, Detector] = {
        "pattern": PatternDetector(),
        "classifier alone": ClassifierDetector(embedder, rules_first=False),
        "classifier": ClassifierDetector(embedder),
    }
    out = {}
    try:
        for set_name, path in SETS.items():
            if set_name.startswith("test") and not test:
                continue
            rows = labeled(path, beam)
            for name, detector in detectors.items():
                out[f"{name} {set_name}"] = score(
                    detector, rows, show_misses, f"{name} on the {set_name} set ({path.name})"
                )
    finally:
        embedder.close()
    return out


def parse_range(text: str) -> list[int]:
    """`1-10,15` -> [1, ..., 10, 15]."""
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--data",
        type=Path,
        help="folder of numbered BEAM chats (e.g. chats/100K); with --labeled: the BEAM rows",
    )
    ap.add_argument("--labeled", action="store_true", help="precision and recall on the labeled sets instead")
    ap.add_argument(
        "--test",
        action="store_true",
        help="with --labeled: also the test sets (test, test2: trained on; test3: development; test4: blind)",
    )
    ap.add_argument("--chats", default="1-20", help="chat numbers, e.g. 1-10,15 (default 1-20)")
    ap.add_argument("--sample", type=int, default=0, help="print this many detections drawn at random")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--detector", choices=("pattern", "classifier"), default="pattern", help="with --data: which detector"
    )
    ap.add_argument("--misses", action="store_true", help="print the misses (with --labeled: every error)")
    args = ap.parse_args()
    if args.labeled:
        score_labeled(args.misses, args.test, args.data)
        return
    if args.data is None:
        ap.error("--data is required (or --labeled)")

    detector: Detector = PatternDetector()
    if args.detector == "classifier":
        embedder = LocalEmbedder(threads=1)
        detector = ClassifierDetector(embedder)
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
        print(f"[chat {n} msg {d.message_id} {d.kind} {d.rule or d.detector}] {d.statement[:220]!r}")


if __name__ == "__main__":
    main()
