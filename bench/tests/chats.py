"""A tiny LoCoMo-shaped sample and a tiny BEAM-shaped chat, written by the benchmarks' tests (never the real data).

The sample's evidence is malformed on purpose in places (as some of LoCoMo's is): the readers must normalise it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


SAMPLE: dict[str, Any] = {
    "sample_id": "tiny",
    "conversation": {
        "speaker_a": "Ann",
        "speaker_b": "Bob",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a puppy called Biscuit last week."},
            {"speaker": "Bob", "dia_id": "D1:2", "text": "Congratulations! What breed is Biscuit?"},
            {"speaker": "Ann", "dia_id": "D1:3", "text": "A beagle. Look at him!", "blip_caption": "a photo of a dog"},
        ],
        "session_2_date_time": "10:00 am on 20 May, 2023",
        "session_2": [
            {"speaker": "Bob", "dia_id": "D2:1", "text": "I ran my first marathon in Lisbon on Sunday."},
            {"speaker": "Ann", "dia_id": "D2:2", "text": "Amazing, how long did the marathon take you?"},
        ],
    },
    "qa": [
        {"question": "What is the name of Ann's puppy?", "answer": "Biscuit", "evidence": ["D1:1"], "category": 4},
        {"question": "Where did Bob run a marathon?", "answer": "Lisbon", "evidence": ["D2:1; D1:02"], "category": 1},
        {"question": "What did Bob bake?", "adversarial_answer": "bread", "evidence": ["D9:9", "D"], "category": 5},
    ],
}
