"""LoCoMo data for the benchmarks: conversations as Message lists, questions with normalised evidence.

The data file (`locomo_dev.json`, CC BY-NC 4.0) lives in `shared/bench/data/` beside the repository and is
never copied into it. Shapes are described in `shared/bench/data/SOURCES.md`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from models.api import Message

DATA = Path(__file__).resolve().parents[2] / "shared" / "bench" / "data" / "locomo_dev.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
_ID = re.compile(r"D:?(\d+):(\d+)")


@dataclass(frozen=True)
class Question:
    """One `qa` item: `evidence` holds the dia_ids (normalised, each naming a real turn), in the given order."""

    conversation_id: str
    text: str
    category: int
    evidence: tuple[str, ...]

    @property
    def sessions(self) -> frozenset[str]:
        """The evidence sessions, e.g. {"D1", "D3"}."""
        return frozenset(e.split(":")[0] for e in self.evidence)


def load(path: Path | None = None) -> list[dict]:
    """The LoCoMo samples (from `path`, by default `DATA` as it is when called); raises FileNotFoundError naming
    the path when the data is missing."""
    path = path or DATA
    if not path.exists():
        raise FileNotFoundError(f"LoCoMo data not found at {path} (see shared/bench/data/SOURCES.md)")
    return json.loads(path.read_text())


def session_keys(conv: dict) -> list[str]:
    """`session_<n>` keys of a conversation, in session order."""
    keys = [k for k in conv if k.startswith("session_") and k.split("_")[1].isdigit() and "date" not in k]
    return sorted(keys, key=lambda k: int(k.split("_")[1]))


def turn_text(turn: dict, captions: bool = False) -> str:
    """A turn's message content: its text, plus ` [shares <blip_caption>]` for a shared image when `captions`."""
    text = turn.get("text", "")
    if captions and turn.get("blip_caption"):
        text = f"{text} [shares {turn['blip_caption']}]"
    return text


def sessions(sample: dict, captions: bool = False) -> list[list[Message]]:
    """The sample's sessions in time order as Message lists (id = dia_id, created_at = the session's date).

    captions: append the image caption of turns that share an image (see `turn_text`); default text only.
    """
    conv = sample["conversation"]
    out = []
    for key in session_keys(conv):
        when = datetime.strptime(conv[f"{key}_date_time"], "%I:%M %p on %d %B, %Y")
        out.append(
            [
                Message(id=t["dia_id"], speaker=t["speaker"], content=turn_text(t, captions), created_at=when)
                for t in conv[key]
                if t.get("text", "").strip()
            ]
        )
    return [s for s in out if s]


def normalise_evidence(raw: list[str], turns: set[str]) -> tuple[str, ...]:
    """Evidence ids cleaned up: "D8:6; D9:17" -> D8:6, D9:17; "D:11:26" -> D11:26; "D30:05" -> D30:5.

    Ids that resolve to no turn in `turns` are dropped; duplicates kept once, first occurrence first.
    """
    out: dict[str, None] = {}
    for item in raw:
        for part in re.split(r"[;,\s]+", item):
            m = _ID.fullmatch(part.strip())
            if m:
                dia = f"D{int(m[1])}:{int(m[2])}"
                if dia in turns:
                    out[dia] = None
    return tuple(out)


def questions(sample: dict, conversation_id: str) -> list[Question]:
    """The sample's questions with resolvable evidence (the others are skipped)."""
    conv = sample["conversation"]
    turns = {t["dia_id"] for k in session_keys(conv) for t in conv[k]}
    out = []
    for qa in sample["qa"]:
        evidence = normalise_evidence(qa.get("evidence", []), turns)
        if evidence:
            out.append(Question(conversation_id, qa["question"], int(qa["category"]), evidence))
    return out
