"""A tiny BEAM-shaped chat written by the benchmarks' tests (never the real data)."""

from __future__ import annotations

import json
from pathlib import Path

UNIQUE = "My sister Alma is moving to Lisbon in the first week of June."
SHARED = "Please always answer me with a short bulleted list of the steps."


def write_chat(root: Path, number: int = 3) -> Path:
    """A BEAM repository root holding chats/100K/<number>/ with two batches and three questions."""
    batches = [
        {
            "batch_number": 1,
            "time_anchor": None,
            "turns": [
                [
                    {
                        "role": "user",
                        "id": 0,
                        "time_anchor": "March-15-2024",
                        "index": "1,1",
                        "content": f"Hi. {UNIQUE} ->-> 1,1",
                    },
                    {
                        "role": "assistant",
                        "id": 1,
                        "content": "That sounds exciting!\n\n1. **Plan** the move early on.",
                    },
                ],
                [
                    {"role": "user", "id": 2, "content": f"{SHARED} Thanks. ->-> 1,2)"},
                    {"role": "assistant", "id": 3, "content": f"Sure. You said: {SHARED}"},
                ],
            ],
        },
        {
            "batch_number": 2,
            "time_anchor": None,
            "turns": [
                [
                    {"role": "user", "id": 4, "time_anchor": "May-02-2024", "content": "Short one."},
                    {"role": "assistant", "id": 5, "content": "Noted, and I will keep it in mind for our next talk."},
                ],
            ],
        },
    ]
    questions = {
        "abstention": [{"question": "What did I say about Mars?"}],
        "information_extraction": [{"question": "Where is Alma moving?", "source_chat_ids": [0]}],
        "instruction_following": [{"question": "How should you answer?", "source_chat_ids": {"a": [2], "b": [2, 0]}}],
    }
    folder = root / "chats" / "100K" / str(number)
    (folder / "probing_questions").mkdir(parents=True)
    (folder / "chat.json").write_text(json.dumps(batches))
    (folder / "probing_questions" / "probing_questions.json").write_text(json.dumps(questions))
    return root
