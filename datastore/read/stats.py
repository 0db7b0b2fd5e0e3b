"""Describing: what a namespace or one conversation holds (counts per level, time range, speakers).

Computed above the providers from the storage protocol (`list_sources`, `scan_messages`, `source_facts`), so
every provider answers alike; it reads the whole namespace, so it is meant for an overview, not for a hot path.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from datastore.storage import Storage
from models.api import DeleteFilter, unknown_conversation
from models.find import LevelCount, SpeakerCount, StatsResponse
from models.time import utc

MAX_SPEAKERS = 100


class Describer:
    """describe: counts of a namespace or a conversation."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def describe(self, ns: str, conversation_id: str | None = None) -> StatsResponse:
        """Counts of the namespace, or of one conversation (or document): sources, messages, nodes per level,
        first and last message time, speakers by message count. A `conversation_id` the namespace does not hold
        counts nothing, with an `unknown_conversation` warning."""
        if conversation_id is not None:
            if self.storage.get_source(ns, conversation_id) is None:
                warning = unknown_conversation(conversation_id, "conversation_id")
                return StatsResponse(
                    namespace=ns,
                    conversation_id=conversation_id,
                    sources=0,
                    messages=0,
                    levels=[],
                    start_time=None,
                    end_time=None,
                    speakers=[],
                    warnings=[warning],
                )
            sources = [conversation_id]
            flt: DeleteFilter | None = DeleteFilter.model_construct(
                conversation_id=conversation_id, document_id=None, speaker=None, start_date=None, end_date=None
            )
        else:
            sources, flt = self.storage.list_sources(ns), None
        speakers: Counter[str] = Counter()
        times: list[datetime] = []
        n_messages = 0
        for m in self.storage.scan_messages(ns, flt):
            n_messages += 1
            speakers[m.speaker] += 1
            if (at := utc(m.created_at)) is not None:
                times.append(at)
        levels: Counter[int] = Counter()
        for facts in self.storage.source_facts(ns, sources).values():
            levels.update(facts.level_counts)
        return StatsResponse(
            namespace=ns,
            conversation_id=conversation_id,
            sources=len(sources),
            messages=n_messages,
            levels=[LevelCount(level=lv, nodes=n) for lv, n in sorted(levels.items()) if lv >= 1],  # lines: no level
            start_time=min(times, default=None),
            end_time=max(times, default=None),
            speakers=[SpeakerCount(speaker=s, messages=n) for s, n in speakers.most_common(MAX_SPEAKERS)],
        )
