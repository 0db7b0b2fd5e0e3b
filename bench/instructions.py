"""How well the PatternDetector finds the standing instructions and preferences of BEAM's chats.

BEAM (data not in this repository) has, per chat, `chat.json` (batches of turns of {role, id, content}) and
`probing_questions/probing_questions.json`, whose `instruction_following` and `preference_following` items name
the user messages where the instruction or preference was given (`source_chat_ids`). Recall: the share of those
messages (each counted once) in which the detector finds something. Precision needs a human: `--sample N` prints
N detections drawn at random (seeded) to judge by eye.

    .venv/bin/python -m bench.instructions --data /path/to/beam/chats/100K --chats 1-10 --sample 40

`--labeled` measures precision and recall on the project's two labeled sets, both written for this benchmark (not
taken from a dataset), each statement labeled instruction, preference, correction, revocation (positives) or none,
said by a user to an assistant or by one person to another (`people`: the statement is Ann's in a chat with Ben):
the development set (bench/data/instruction_statements.tsv, 307 statements: the rules were fixed on it and the
classifier is trained on it) and the frozen test set (bench/data/instruction_statements_test.tsv, 337 statements
written for issue 34 before the rules were read, never tuned on). A statement counts as detected when the
detector returns anything for it. Detectors: `pattern` (PatternDetector, the rules), `classifier alone`
(bench/instruction_classifier.py: a classifier over MiniLM sentence embeddings trained on the development set when
the benchmark starts, behind the rules' rejections) and `classifier` (the rules, plus what that classifier finds).
`--misses` lists each detector's errors on both sets; `--cv` adds 5-fold cross-validation of the classifier on the
development set (how its hyper-parameters were chosen). Goal (issues 25 and 34): precision >= 0.95, recall >= 0.85
on the test set. `--data ... --detector classifier` runs the classifier on BEAM's chats.

    .venv/bin/python -m bench.instructions --labeled [--misses] [--cv]

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

import numpy as np

from bench import instruction_classifier as clf
from bench.instruction_classifier import ClassifierDetector
from models.api import Message
from models.instructions import Detected
from services.embedding import Embedder, LocalEmbedder
from services.instructions import Detector, PatternDetector

LABELED = Path(__file__).resolve().parent / "data" / "instruction_statements.tsv"
TEST = Path(__file__).resolve().parent / "data" / "instruction_statements_test.tsv"
SETS = {"development": LABELED, "test": TEST}
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


def score_labeled(show_misses: bool = False) -> dict[str, dict[str, float]]:
    """The detectors on both labeled sets (development first, the rules first): the rules, the classifier alone
    behind the rules' rejections, and the two together (the default); {"<detector> <set>": scores}."""
    embedder = LocalEmbedder(threads=1)
    trained = train(embedder)
    detectors: dict[str, Detector] = {
        "pattern": PatternDetector(),
        "classifier alone": ClassifierDetector(embedder, trained, rules_first=False),
        "classifier": ClassifierDetector(embedder, trained),
    }
    out = {}
    try:
        for set_name, path in SETS.items():
            rows = labeled(path)
            for name, detector in detectors.items():
                out[f"{name} {set_name}"] = score(
                    detector, rows, show_misses, f"{name} on the {set_name} set ({path.name})"
                )
    finally:
        embedder.close()
    return out


def train(embedder: Embedder, path: Path = LABELED) -> clf.LinearClassifier:
    """The classifier trained on the labeled rows at `path` (the development set), embedded by `embedder`."""
    rows = labeled(path)
    vectors = embedder.embed([text for _, _, text in rows])
    return clf.train(vectors, np.array([clf.LABEL_CLASS[label] for label, _, _ in rows]))


def cross_validate(folds: int = 5, seed: int = 0) -> None:
    """5-fold cross-validation of the classifier (alone, behind the rules' rejections: the rules were fixed on this
    set) on the development set: each fold scored by a classifier trained on the other four, at each threshold of a
    small grid; prints precision and recall per threshold. How THRESHOLD was chosen (with PENALTY, by the same
    folds): the highest recall at precision >= 0.95."""
    rows = labeled(LABELED)
    embedder = LocalEmbedder(threads=1)
    try:
        vectors = embedder.embed([text for _, _, text in rows])
        classes = np.array([clf.LABEL_CLASS[label] for label, _, _ in rows])
        order = np.random.default_rng(seed).permutation(len(rows))
        parts = np.array_split(order, folds)
        for threshold in (0.5, 0.6, 0.7, 0.8, 0.9):
            tp = fp = fn = 0
            for part in parts:
                rest = np.setdiff1d(order, part)
                trained = clf.train(vectors[rest], classes[rest])
                detector = ClassifierDetector(embedder, trained, threshold, rules_first=False)
                for i in part:
                    label, chat, text = rows[i]
                    hit = bool(detected(detector, chat, text))
                    tp += hit and label != "none"
                    fp += hit and label == "none"
                    fn += not hit and label != "none"
            print(
                f"cv threshold {threshold}: precision {tp}/{tp + fp} = {tp / max(tp + fp, 1):.3f}; "
                f"recall {tp}/{tp + fn} = {tp / max(tp + fn, 1):.3f}"
            )
    finally:
        embedder.close()


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
    ap.add_argument("--labeled", action="store_true", help="precision and recall on the labeled sets instead")
    ap.add_argument("--cv", action="store_true", help="with --labeled: cross-validate the classifier on the dev set")
    ap.add_argument("--chats", default="1-20", help="chat numbers, e.g. 1-10,15 (default 1-20)")
    ap.add_argument("--sample", type=int, default=0, help="print this many detections drawn at random")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--detector", choices=("pattern", "classifier"), default="pattern", help="with --data: which detector"
    )
    ap.add_argument("--misses", action="store_true", help="print the misses (with --labeled: every error)")
    args = ap.parse_args()
    if args.labeled:
        score_labeled(args.misses)
        if args.cv:
            cross_validate()
        return
    if args.data is None:
        ap.error("--data is required (or --labeled)")

    detector: Detector = PatternDetector()
    if args.detector == "classifier":
        embedder = LocalEmbedder(threads=1)
        detector = ClassifierDetector(embedder, train(embedder))
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
