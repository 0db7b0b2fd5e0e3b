"""Copy a whole store into another provider (`pyramind migrate --from local --to postgres|pinecone`).

Everything is copied as stored, through the providers' hooks: source rows (version and counters), messages
(seq and token offsets), nodes with their embeddings and tree links (ids, parent, children, positions). Nothing
is re-chunked, re-summarised or re-embedded, so both stores must use the same embedding model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyramind.datastore.datastore import DataStore, WriteBatch
from pyramind.services.errors import EmbeddingMismatchError, StoreError

# progress(namespace, source_id, done, total, action): after each source; done/total count the namespace's
# sources; action is "copied" or "skipped".
Progress = Callable[[str, str, int, int, str], None]


def migrate(
    src: DataStore, dst: DataStore, namespaces: list[str] | None = None, progress: Progress | None = None
) -> dict[str, Any]:
    """Copy every source of `namespaces` (default: all of `src`) from `src` into `dst`, then verify counts.

    Resumable: a source whose row at the destination has the source's version is skipped (each source is
    written by one `_commit`, its row last, so a present row means a finished copy); any other state at the
    destination (absent, cut short, older) is replaced by the source's.

    Returns {"namespaces": {ns: {"sources", "copied", "skipped", "messages", "nodes"}}, plus the same five
    totals}, all counts of the source store. Raises EmbeddingMismatchError when the embedders differ, StoreError
    when a source's message or node count at the destination differs from the source's after the copy.
    """
    if (src.embedder.model_name, src.embedder.dimension) != (dst.embedder.model_name, dst.embedder.dimension):
        raise EmbeddingMismatchError(
            f"migrate copies vectors as they are: the source store's embedder is {src.embedder.model_name} "
            f"({src.embedder.dimension}), the destination's {dst.embedder.model_name} ({dst.embedder.dimension})"
        )
    keys = ("sources", "copied", "skipped", "messages", "nodes")
    report: dict[str, Any] = {"namespaces": {}, **dict.fromkeys(keys, 0)}
    for ns in namespaces if namespaces is not None else src._list_namespaces():
        counts = _copy_namespace(src, dst, ns, progress)
        report["namespaces"][ns] = counts
        for k in keys:
            report[k] += counts[k]
    return report


def _copy_namespace(src: DataStore, dst: DataStore, ns: str, progress: Progress | None) -> dict[str, int]:
    source_ids = src._list_sources(ns)
    out = dict.fromkeys(("sources", "copied", "skipped", "messages", "nodes"), 0)
    expected: dict[str, tuple[int, int]] = {}
    for done, sid in enumerate(source_ids, 1):
        row = src._get_source(ns, sid)
        if row is None:  # deleted since the listing
            continue
        messages = src._messages_from(ns, sid, -1)
        nodes = src._source_nodes(ns, sid)
        expected[sid] = (len(messages), len(nodes))
        out["sources"] += 1
        out["messages"] += len(messages)
        out["nodes"] += len(nodes)
        have = dst._get_source(ns, sid)
        if have is not None and have.version == row.version:
            action = "skipped"
        else:
            vectors = src._get_vectors(ns, [n.id for n in nodes])
            missing = [n.id for n in nodes if n.id not in vectors]
            if missing:
                raise StoreError(f"{ns}/{sid}: the source store has no vector for nodes {missing[:5]}")
            batch = WriteBatch(source=row, messages=messages, nodes=[(n, vectors[n.id]) for n in nodes],
                               replace=True)
            dst._commit(ns, batch, have.version if have else 0)
            action = "copied"
        out[action] += 1
        if progress is not None:
            progress(ns, sid, done, len(source_ids), action)
    for sid, (n_msgs, n_nodes) in expected.items():
        got = (len(dst._messages_from(ns, sid, -1)), len(dst._source_nodes(ns, sid)))
        if got != (n_msgs, n_nodes):
            raise StoreError(
                f"{ns}/{sid}: the destination holds {got[0]} messages and {got[1]} nodes, the source "
                f"{n_msgs} and {n_nodes}; run migrate again"
            )
    return out
