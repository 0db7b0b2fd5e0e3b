"""Describing: what a namespace or one conversation holds (counts per level, time range, speakers).

Computed above the providers from the same hooks as everything else (`_list_sources`, `_scan_messages`,
`_source_nodes`), so every provider answers alike; it reads the whole namespace, so it is meant for an overview,
not for a hot path.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from pyramind.datastore.find import Finding
from pyramind.models.api import DeleteFilter
from pyramind.models.find import LevelCount, SpeakerCount, StatsResponse
from pyramind.models.time import utc
from pyramind.services.errors import NotFoundError

MAX_SPEAKERS = 100


class Describing(Finding):
    """describe_sync."""

    def describe_sync(self, ns: str, conversation_id: str | None = None) -> StatsResponse:
        """Counts of the namespace, or of one conversation (or document): sources, messages, nodes per level,
        first and last message time, speakers by message count. Raises NotFoundError naming `conversation_id`."""
        if conversation_id is not None:
            if self._get_source(ns, conversation_id) is None:
                raise NotFoundError(f"no conversation {conversation_id!r}", "conversation_id")
            sources = [conversation_id]
            flt: DeleteFilter | None = DeleteFilter.model_construct(
                conversation_id=conversation_id, document_id=None, speaker=None, start_date=None, end_date=None)
        else:
            sources, flt = self._list_sources(ns), None
        speakers: Counter[str] = Counter()
        times: list[datetime] = []
        n_messages = 0
        for m in self._scan_messages(ns, flt):
            n_messages += 1
            speakers[m.speaker] += 1
            if (at := utc(m.created_at)) is not None:
                times.append(at)
        levels: Counter[int] = Counter()
        for source_id in sources:
            levels.update(n.level for n in self._source_nodes(ns, source_id))
        return StatsResponse(
            namespace=ns, conversation_id=conversation_id, sources=len(sources), messages=n_messages,
            levels=[LevelCount(level=lv, nodes=n) for lv, n in sorted(levels.items())],
            start_time=min(times, default=None), end_time=max(times, default=None),
            speakers=[SpeakerCount(speaker=s, messages=n) for s, n in speakers.most_common(MAX_SPEAKERS)],
        )
