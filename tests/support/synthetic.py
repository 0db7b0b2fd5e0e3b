"""Small synthetic conversations and documents: varied, deterministic, about 25 tokens per message."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from models.api import Message

TOPICS = {
    "garden": [
        "tomatoes ripened on the south fence",
        "the compost heap needs turning",
        "slugs ate the lettuce",
        "we planted garlic before the frost",
        "the apple tree finally bore fruit",
    ],
    "travel": [
        "the night train to Vienna was delayed",
        "our hostel in Lisbon had a rooftop terrace",
        "we missed the ferry to Naxos",
        "the museum pass saved us money in Paris",
        "the hike above Chamonix had glacier views",
    ],
    "cooking": [
        "the sourdough starter doubled overnight",
        "I burnt the caramel twice",
        "the curry needed more cardamom",
        "fresh pasta dries better on a broom handle",
        "the pressure cooker makes chickpeas in forty minutes",
    ],
    "music": [
        "the cello string snapped during rehearsal",
        "we learned a new Bach fugue",
        "the choir concert sold out",
        "my metronome battery died",
        "the jazz trio played until midnight",
    ],
    "work": [
        "the quarterly report is due Friday",
        "the server migration ran all weekend",
        "our manager approved the new budget",
        "the client wants a demo on Tuesday",
        "we hired two engineers for the data team",
    ],
}


def conversation(
    speakers: tuple[str, str],
    n: int,
    *,
    topics: list[str] | None = None,
    start: datetime | None = None,
    prefix: str = "m",
    marker: str = "",
    first: int = 0,
) -> list[Message]:
    """`n` messages alternating between two speakers, one minute apart from `start`, cycling through
    `topics`; ids `<prefix>-<i>` from `first`; `marker` (a word) is added to every message when given."""
    topics = topics or list(TOPICS)
    start = start or datetime(2024, 1, 1, 9, 0, tzinfo=UTC)
    out = []
    for i in range(first, first + n):
        topic = topics[i % len(topics)]
        facts = TOPICS[topic]
        k = i // len(topics)
        text = (
            f"About {topic}, {facts[k % len(facts)]}, and then {facts[(k + 2) % len(facts)]} "
            f"(note {i}).{' ' + marker if marker else ''}"
        )
        out.append(
            Message(id=f"{prefix}-{i}", speaker=speakers[i % 2], content=text, created_at=start + timedelta(minutes=i))
        )
    return out


def document_text(paragraphs: int, topic: str) -> str:
    facts = TOPICS[topic]
    return "\n".join(
        f"Section {p}: {facts[p % len(facts)]}. Also {facts[(p + 2) % len(facts)]}." for p in range(paragraphs)
    )


LONG_T0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
LONG_NOW = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
PLACES = ["Lisbon", "Kyoto", "Oslo", "Nairobi", "Lima", "Hanoi", "Quebec", "Tbilisi", "Perth", "Cusco"]
HOBBIES = [
    "pottery",
    "bouldering",
    "violin",
    "sourdough baking",
    "chess",
    "kayaking",
    "birdwatching",
    "salsa dancing",
    "woodcarving",
    "astronomy",
]


def long_conversation(n_days: int = 24) -> list[Message]:
    """A conversation over `n_days` days: each day Ann tells one fact and Bo answers (distinct words per day)."""
    out = []
    for d in range(n_days):
        when = LONG_T0 + timedelta(days=3 * d)
        place, hobby = PLACES[d % 10], HOBBIES[(d * 3) % 10]
        out += [
            Message(
                id=f"d{d}a",
                speaker="Ann",
                created_at=when,
                content=f"On day {d} I planned a trip to {place} and practised {hobby} for {d + 2} hours.",
            ),
            Message(
                id=f"d{d}b",
                speaker="Bo",
                created_at=when + timedelta(minutes=1),
                content=f"That sounds great, Ann. How did the {hobby} go, and who joins you in {place}?",
            ),
            Message(
                id=f"d{d}c",
                speaker="Ann",
                created_at=when + timedelta(minutes=2),
                content=f"My cousin number {d} joins me; we booked a small flat near the old market of {place}.",
            ),
        ]
    return out


DATABASE_ANSWER = (
    "Sure! Let's look at your options for the database. "
    "PostgreSQL offers mature replication, rich indexing and strong consistency for relational data. "
    "SQLite is a single file, needs no server and suits small embedded apps with one writer. "
    "MongoDB stores documents and scales out, but joins across collections are awkward. "
    "Cassandra handles huge write volumes across data centres at the cost of flexible queries. "
    "In short, PostgreSQL suits your relational data best, with replication for the read load. "
    "Let me know if you want a migration plan."
)
"""A long assistant answer: its lead is its second sentence, its point the sixth (services/lines.py)."""


def turns(said: list[tuple[str, str]], t0: datetime, prefix: str = "m") -> list[Message]:
    """Messages `<prefix><k>` of (speaker, text) pairs, one minute apart from `t0`."""
    return [
        Message(id=f"{prefix}{k}", speaker=who, content=text, created_at=t0 + timedelta(minutes=k))
        for k, (who, text) in enumerate(said)
    ]
