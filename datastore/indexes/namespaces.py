"""Each namespace's in-memory search indexes (exact vectors + optional IVF, BM25), above the providers: fed from
any Storage by its listing methods, kept current with the store's per-namespace version, dropped when idle.

A `NamespaceIndex` holds the namespace's nodes under row ids of its own (increasing, so `RowTable` keeps them
sorted), with what the filters need (source, speakers, sessions; levels and times are in the `RowTable`). Lines
(level-0 nodes, datastore/read/outline.py) are held too, in a vector and a BM25 index of their own (`lines`): the
searches of chunks and summaries (`vectors`, `text`) never see them, so their candidates, BM25 statistics and IVF
index are those of levels 1 and up alone, and `Outline` ranks a conversation's lines through `lines`. It is
as of the store's namespace version token it was last refreshed at (`Storage.namespace_version`), and of each
source's stamp (`Storage.source_stamps`).

Before every search `NamespaceIndexes.get` reads the token (one small read). When it moved (a commit made by this
process or by another one, a deletion), the source stamps are read and only the sources whose stamp changed, or
that appeared or went away, are dropped from the index and listed again (`Storage.index_entries`): several
server processes over one store search the same memory, and a forgotten text is gone from the index before the
next search of any process answers. The token is read before the stamps and the stamps before the nodes, so a
commit landing in between is caught by the next search. A refresh that fails (the store went away) drops the
namespace's index, so nothing stale is served afterwards: the next search loads it again.

Memory is bounded two ways: an index unused for `idle_seconds` is dropped (checked at most every SWEEP_EVERY
seconds), and when the indexes together hold more than `max_nodes` nodes the least recently used ones are
dropped until they fit (the one being searched stays). A node costs about 3 KB with MiniLM's 384 dimensions
(1.5 KB of float32 vector, BM25 postings and vocabulary, ids, facts; measured 2.3-2.6 KB in namespaces of 2k nodes
and more, 3.4 KB at ~75, whose vocabulary weighs more a node), ~300 MB per 100k nodes, and a namespace being listed
~12 KB a node until its load ends (the listed entries, their tokens); a line counts as a node (its vector is as
large, its postings fewer), and a conversation holds about one line per message, several per chunk.

A starting server preloads (`start_preload`, with snapshots only): on a thread of its own it reads back the
snapshots of the namespaces used last, newest first (`Snapshots.recent`), and brings each current like a search
would, until `preload_nodes` nodes are held (INDEX_PRELOAD_SHARE of INDEX_MAX_NODES). It never drops an index: a
namespace a request loaded meanwhile is skipped, and one that would take the held nodes past `max_nodes` too. A
request for a namespace being preloaded waits for that read under the index's lock and then finds it current:
a namespace is read once. Preloaded indexes are marked used before anything a request touches after the start
(newest first), so they are the first an eviction drops.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from datastore.indexes.rows import NodeIds
from datastore.indexes.snapshots import Snapshots, mapped, no_collection
from datastore.indexes.text import TextIndex
from datastore.indexes.vectors import VectorIndex
from datastore.storage import IndexEntry, Storage
from services.tree import indexed_text

LOAD_SLICE = 5_000  # entries added to the indexes at a time
LOAD_SOURCES = 20  # sources listed at a time when a namespace is loaded (the next listed while one is indexed)
SWEEP_EVERY = 60.0  # seconds between sweeps for idle indexes
RESTORED = "\x00restored"  # the token of an index read from a snapshot: never a store's, so it is refreshed
log = logging.getLogger(__name__)


@dataclass
class PreloadState:
    """What the start's preload did so far (NamespaceIndexes.preload): namespaces and nodes read back and brought
    current, seconds from its start to now (or to its end), and whether it ended (also when there was none)."""

    namespaces: int = 0
    nodes: int = 0
    seconds: float = 0.0
    done: bool = True


class LineIndex:
    """The lines (level 0) of one namespace: their vectors (exact: a search is always within a few sources) and
    a BM25 index over `speaker: text` (what a line's embedding is of, services/tree.embedded_text), with each
    source's line rows in message order. Not thread-safe: the NamespaceIndex's lock guards it."""

    def __init__(self, dimension: int, nodes_text: TextIndex | None = None) -> None:
        """nodes_text: the namespace's BM25 index of its nodes, whose vocabulary the lines' index shares."""
        self.vectors = VectorIndex(dimension, 0)
        self.text = TextIndex(nodes_text)
        self.by_source: dict[str, list[int]] = {}  # source id -> its line rows, in position order

    def __len__(self) -> int:
        return len(self.vectors)


class NamespaceIndex:
    """One namespace's vectors and BM25 index, with the per-row facts its filters use, and its lines' indexes
    (`lines`); `lock` guards all of it. Row ids are this object's own (1, 2, ...), never a provider's."""

    def __init__(self, dimension: int, ann_min_rows: int) -> None:
        self.vectors = VectorIndex(dimension, ann_min_rows)
        self.text = TextIndex()
        self.lines = LineIndex(dimension, self.text)  # one vocabulary: a word said in a line and a chunk held once
        self.token: str | None = None  # the store's namespace version this index is as of (None: never loaded)
        self.forgets_seen = 0  # the snapshots' forget count as of which it was last current (Snapshots.forgets)
        self.forks: dict[str, dict[str, Any] | None] = {}  # source id -> its fork record, as of `token`
        self.stamps: dict[str, str] = {}  # source id -> stamp, as of `token`
        self.line_ids: dict[str, list[str]] = {}  # source id -> its lines' node ids (`line_ids_of`)
        self.lock = threading.Lock()
        self.used = time.monotonic()
        self.dimension = dimension
        self._next = 1
        self.ids = NodeIds()  # row id <-> node id, as arrays (rows.py)
        self.by_source: dict[str, list[int]] = {}  # source id -> its rows
        self.source_type_of: dict[str, str] = {}  # source id -> "conversation" | "document"
        self.speakers: dict[str, set[int]] = {}  # speaker -> the rows naming them
        self.sessions: dict[str, set[int]] = {}  # session id -> its rows

    def __len__(self) -> int:
        return len(self.ids)

    def __getstate__(self) -> dict[str, object]:
        """What a snapshot holds (datastore/indexes/snapshots.py): everything but the lock."""
        state = dict(self.__dict__)
        del state["lock"]
        state["forgets_seen"] = 0  # a count of this process only
        state["forks"] = {}
        state["line_ids"] = {}
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self.line_ids = {}  # a snapshot written before this cache held none
        self.lock = threading.Lock()
        self.used = time.monotonic()
        self.forgets_seen = 0

    def add(self, entries: Sequence[IndexEntry]) -> None:
        """Add nodes (of sources not held, or just dropped) to the indexes: lines (level 0) to `lines`, the others
        to `vectors` and `text`."""
        if not entries:
            return
        rows = np.arange(self._next, self._next + len(entries), dtype=np.int64)
        self._next += len(entries)
        levels = np.array([e.level for e in entries], dtype=np.int16)
        starts = np.array([e.start for e in entries], dtype=np.float64)
        ends = np.array([e.end for e in entries], dtype=np.float64)
        vectors = np.stack([np.asarray(e.vector, dtype=np.float32) for e in entries])
        line = levels == 0
        nodes = ~line
        if nodes.any():
            texts = [
                indexed_text(e.level, e.text, e.speakers)
                for e, keep in zip(entries, nodes.tolist(), strict=True)
                if keep
            ]
            self.vectors.add(rows[nodes], vectors[nodes], levels[nodes], starts[nodes], ends[nodes])
            self.text.add(rows[nodes], texts, levels[nodes], starts[nodes], ends[nodes])
        if line.any():
            said = [indexed_text(0, e.text, e.speakers) for e in entries if e.level == 0]
            self.lines.vectors.add(rows[line], vectors[line], levels[line], starts[line], ends[line])
            self.lines.text.add(rows[line], said, levels[line], starts[line], ends[line])
        self.line_ids = {}
        row_of = self.ids.row_of()
        if moved := sorted(row_of[e.id] for e in entries if e.id in row_of):  # moved to another source meanwhile
            self._forget(moved)
        self.ids.add(rows, [e.id for e in entries])
        for row, e in zip(rows.tolist(), entries, strict=True):
            self.source_type_of[e.source_id] = e.source_type
            if e.level == 0:  # a line is never a search candidate: no speaker or session facts
                self.lines.by_source.setdefault(e.source_id, []).append(row)
                continue
            self.by_source.setdefault(e.source_id, []).append(row)
            for s in e.speakers:
                self.speakers.setdefault(s, set()).add(row)
            for s in e.session_ids:
                self.sessions.setdefault(s, set()).add(row)

    def drop_sources(self, source_ids: Iterable[str]) -> None:
        """Remove every node of these sources."""
        sources = list(source_ids)
        rows = [r for sid in sources for r in self.by_source.pop(sid, [])]
        rows += [r for sid in sources for r in self.lines.by_source.pop(sid, [])]
        self._forget(rows, listed=True)

    def line_ids_of(self, source_id: str) -> list[str]:
        """The node ids of the source's lines, in message order (the caller must not change the list): kept
        until a node is added or removed, as a block ranks a conversation's lines at every request (mapping its
        5,000 rows to ids each time was ~3% of a warm block's CPU)."""
        ids = self.line_ids.get(source_id)
        if ids is None:
            ids = self.line_ids[source_id] = self.ids.held(self.lines.by_source.get(source_id, []))
        return ids

    def unmap(self) -> None:
        """Copy into memory of its own each array still a view of the snapshot file it was read from
        (Snapshots.read), so that file's pages are released once no search holds them: before rows are dropped (a
        forget, a changed source), as a removed file kept mapped would keep forgotten vectors on the disk."""
        for part in (self.vectors, self.text, self.lines.vectors, self.lines.text, self.ids):
            for name, value in list(vars(part).items()):
                if isinstance(value, np.ndarray) and mapped(value):
                    setattr(part, name, value.copy())

    def compact(self) -> None:
        """Drop every part's dead rows now (a removed row is only marked dead until a quarter of a part is), and
        the vocabulary's terms no row holds any more: a snapshot is written compact, so a forgotten row's vector,
        postings, node id and words never reach the disk again."""
        for part in (self.vectors, self.text, self.lines.vectors, self.lines.text, self.ids):
            part.compact()
        self.text.vocab.keep(self.text.held_terms() | self.lines.text.held_terms())

    def _forget(self, rows: Sequence[int], listed: bool = False) -> None:
        """Remove these rows from every index and table; listed: their sources' row lists were popped already
        (`drop_sources`), so those lists are not searched for them."""
        if not rows:
            return
        self.line_ids = {}
        self.unmap()
        arr = np.array(sorted(set(rows)), dtype=np.int64)
        self.vectors.remove(arr)
        self.text.remove(arr)
        self.lines.vectors.remove(arr)
        self.lines.text.remove(arr)
        self.ids.remove(arr)
        gone = set(rows)
        if not listed:
            for by_source in (self.by_source, self.lines.by_source):
                for held in by_source.values():
                    if not gone.isdisjoint(held):
                        held[:] = [r for r in held if r not in gone]
        for table in (self.speakers, self.sessions):
            for key in [k for k, found in table.items() if not gone.isdisjoint(found)]:
                table[key] -= gone
                if not table[key]:
                    del table[key]

    def vectors_of(self, node_ids: Sequence[str]) -> dict[str, np.ndarray]:
        """{node id: its vector (float32, as listed from the store)} of those of `node_ids` held, lines included."""
        row_of = self.ids.row_of()
        rows = np.array(sorted({row_of[i] for i in node_ids if i in row_of}), dtype=np.int64)
        out: dict[str, np.ndarray] = {}
        for vectors in (self.vectors, self.lines.vectors):
            found, matrix = vectors.rows(rows)
            out.update((i, matrix[k]) for k, i in enumerate(self.ids.of(found)) if i is not None)
        return out

    def rows_of_source(self, source_type: str | None, source_id: str) -> set[int]:
        """The rows of one source (of that type, when given)."""
        if source_type is not None and self.source_type_of.get(source_id) != source_type:
            return set()
        return set(self.by_source.get(source_id, []))

    def rows_of_type(self, source_type: str) -> set[int]:
        """The rows of every source of this type."""
        return {r for sid, t in self.source_type_of.items() if t == source_type for r in self.by_source.get(sid, [])}


class NamespaceIndexes:
    """The indexes of every namespace searched recently, over one Storage.

    storage: what they are fed from (its `namespace_version`, `source_stamps` and `index_entries`). dimension: the
    embedder's. ann_min_rows: the ANN_MIN_ROWS setting. idle_seconds: INDEX_IDLE_SECONDS (an index unused this
    long is dropped). max_nodes: INDEX_MAX_NODES (the most nodes held over every namespace).

    snapshots: where indexes are written and read back (INDEX_SNAPSHOT_DIR, datastore/indexes/snapshots.py): a
    cold namespace with a snapshot is read from it and refreshed by source stamps, not listed whole; None: none.

    preload_nodes: the most nodes `preload` brings in (INDEX_PRELOAD_SHARE x INDEX_MAX_NODES); 0: none.

    `on_load`, when set (server/metrics.py sets it), is called after each index is loaded or refreshed from the
    store, in the searching thread, with the kind ("load": from nothing, a cold namespace; "refresh": only the
    sources that changed; "preload": a load by the start's preload) and the seconds it took.
    """

    def __init__(
        self,
        storage: Storage,
        dimension: int,
        ann_min_rows: int,
        idle_seconds: float,
        max_nodes: int,
        snapshots: Snapshots | None = None,
        preload_nodes: int = 0,
    ) -> None:
        self.storage = storage
        self.dimension = dimension
        self.ann_min_rows = ann_min_rows
        self.idle_seconds = idle_seconds
        self.max_nodes = max_nodes
        self.snapshots = snapshots
        self._indexes: dict[str, NamespaceIndex] = {}
        self._guard = threading.Lock()
        self._swept = time.monotonic()
        self.on_load: Callable[[str, float], None] | None = None
        self.preload_nodes = preload_nodes if snapshots is not None else 0
        self._preload = PreloadState()
        self._preload_started = 0.0
        self._preloader: threading.Thread | None = None
        self._closing = threading.Event()
        self._ahead = ThreadPoolExecutor(2, thread_name_prefix="pyramind-index-ahead")  # `load_soon`

    def __len__(self) -> int:
        return len(self._indexes)

    def held(self) -> dict[str, int]:
        """{namespace: nodes held} of every index in memory."""
        with self._guard:
            return {ns: len(ix) for ns, ix in self._indexes.items()}

    def get(self, ns: str, refresh: bool = True) -> NamespaceIndex:
        """The namespace's index, current as of the store's namespace version read now (loaded when missing,
        refreshed by source when it moved); refresh=False skips the version read for an index already loaded
        (the later steps of one search). Raises what the store raises (StoreError...), dropping the index."""
        now = time.monotonic()
        with self._guard:
            if now - self._swept > SWEEP_EVERY:
                self._sweep(now)
            index = self._indexes.get(ns)
            if index is None:
                index = self._indexes[ns] = NamespaceIndex(self.dimension, self.ann_min_rows)
            index.used = now
        if not refresh and index.token is not None:
            return index
        forgets = 0 if self.snapshots is None else self.snapshots.forgets(ns)  # read before the version
        try:
            token = self.storage.namespace_version(ns)  # outside the lock: searches of a current index never wait
            if token != index.token:
                with index.lock:
                    self._current(ns, index, token, forgets)
        except BaseException:
            self.drop(ns)
            raise
        if index.token == token and forgets > index.forgets_seen:
            index.forgets_seen = forgets  # current as of a version read after those forgets: see _current
        self._bound(ns)
        return index

    def load_soon(self, ns: str) -> None:
        """Start loading the namespace's index on a thread of its own when none is held (a cold namespace), and
        return at once: a request calls it before the reads and the embedding that do not depend on the index, so
        the load overlaps them (a cold /context at 2k nodes: its snapshot read and source stamps while it reads
        the conversation's messages and embeds the query). The request's own `get` then waits for that load under
        the index's lock and finds it current, or, started first, loads it itself: a namespace is loaded once.
        A load that fails here is left to that `get`, which raises. No-op for a held index, or once closing."""
        if self.held_index(ns) is not None or self._closing.is_set():
            return
        try:
            self._ahead.submit(self._load_ahead, ns)
        except RuntimeError:  # shut down meanwhile (`close`)
            return

    def _load_ahead(self, ns: str) -> None:
        try:
            self.get(ns)
        except Exception:  # the request's own `get` meets it again and raises it
            log.debug("a load ahead of a request failed", exc_info=True)

    def _current(self, ns: str, index: NamespaceIndex, token: str, forgets: int, load: str = "load") -> None:
        """Refresh `index` to `token` under its lock (`_refresh`), report it (`on_load`, a load as `load`) and,
        for a load, queue its snapshot. `forgets`: the snapshots' forget count read before `token`, so the index,
        current as of `token`, holds nothing those forgets removed and its snapshot may be written (snapshots.py)."""
        kind, started = (load if index.token is None else "refresh"), time.perf_counter()
        try:
            refreshed = self._refresh(ns, index, token)
        except BaseException:
            index.token = None  # half refreshed: never taken as current
            raise
        if index.token == token:
            index.forgets_seen = max(index.forgets_seen, forgets)
        if refreshed and self.on_load is not None:
            self.on_load(kind, time.perf_counter() - started)
        if refreshed and kind == load and self.snapshots is not None:
            self.snapshots.save_later(ns, index)

    def _refresh(self, ns: str, index: NamespaceIndex, token: str) -> bool:
        """Bring `index` to the store as of `token` (read before this): the sources whose stamps changed are
        listed again. Called under the index's lock. Returns False when another search had done it meanwhile."""
        if token == index.token:
            return False  # another search refreshed it meanwhile
        if index.token is None and self.snapshots is not None:
            self._restore(ns, index)
        stamps = self.storage.source_stamps(ns)
        if index.token is None:
            changed: list[str] | None = None  # everything
            index.drop_sources(list(index.by_source))
        else:
            changed = [sid for sid, stamp in stamps.items() if index.stamps.get(sid) != stamp]
            gone = [sid for sid in {*index.by_source, *index.lines.by_source} if sid not in stamps]
            index.drop_sources(changed + gone)
        if sources := (sorted(stamps) if changed is None else sorted(changed)):
            # rows in one order on every provider (source, level, position), so exact ties rank alike everywhere
            parts = [sources[i : i + LOAD_SOURCES] for i in range(0, len(sources), LOAD_SOURCES)]
            # the entries listed and the rows added hold no cycles: collecting while they pile up only rescans
            # them (-20% at 12.5k nodes); the collector runs again once the load is done (snapshots.py)
            with no_collection(), ThreadPoolExecutor(1, thread_name_prefix="pyramind-index-load") as reader:
                # the next part is listed while this one is indexed (the store's wait and its own work overlap ours)
                ahead = reader.submit(self._listed, ns, parts[0])
                for i in range(len(parts)):
                    entries = ahead.result()
                    if i + 1 < len(parts):
                        ahead = reader.submit(self._listed, ns, parts[i + 1])
                    self._add(index, entries)
        index.vectors.prepare()  # the IVF index, when due, is built with the load (and so is in its snapshot)
        if changed is None:  # a load: postings as one block each (a term's own arrays cost ~50x more)
            index.text.prepare()
            index.lines.text.prepare()
        index.stamps = stamps
        index.forks = {}  # read again as of this version (IndexedSearch.fork_of)
        index.token = token
        return True

    def _restore(self, ns: str, index: NamespaceIndex) -> None:
        """Fill an empty `index` from the namespace's snapshot, if any, as of no version (RESTORED): the caller
        then refreshes it by source stamps like any index."""
        assert self.snapshots is not None
        found = self.snapshots.read(ns)
        if found is None or found.dimension != index.dimension:
            return
        lock, used = index.lock, index.used
        index.__dict__.update(found.__dict__)
        index.lock, index.used = lock, used
        index.vectors.ann_min_rows = self.ann_min_rows
        index.token = RESTORED

    def _listed(self, ns: str, source_ids: list[str]) -> list[IndexEntry]:
        """The entries of these sources, in (source, level, position) order."""
        entries = list(self.storage.index_entries(ns, source_ids))
        entries.sort(key=lambda e: (e.source_id, e.level, e.position))
        return entries

    @staticmethod
    def _add(index: NamespaceIndex, entries: list[IndexEntry]) -> None:
        """Add listed entries to the index, growing its arrays once; lines (level 0, datastore/read/outline.py)
        go to the lines' own indexes (`NamespaceIndex.add`)."""
        lines = sum(1 for e in entries if e.level == 0)
        index.vectors.reserve(len(entries) - lines)  # grown once per part, not copied slice after slice
        index.text.reserve(len(entries) - lines)
        index.lines.vectors.reserve(lines)
        index.lines.text.reserve(lines)
        for i in range(0, len(entries), LOAD_SLICE):
            index.add(entries[i : i + LOAD_SLICE])

    def _sweep(self, now: float) -> None:
        """Drop the indexes unused for idle_seconds (called under the guard)."""
        self._swept = now
        for ns in [ns for ns, ix in self._indexes.items() if now - ix.used > self.idle_seconds]:
            self._save(ns, self._indexes.pop(ns))

    def _bound(self, keep: str) -> None:
        """Drop the least recently used indexes (never `keep`) while all of them hold more than max_nodes."""
        with self._guard:
            total = sum(len(ix) for ix in self._indexes.values())
            for ns in sorted(self._indexes, key=lambda n: self._indexes[n].used):
                if total <= self.max_nodes:
                    return
                if ns != keep:
                    dropped = self._indexes.pop(ns)
                    total -= len(dropped)
                    self._save(ns, dropped)

    def _save(self, ns: str, index: NamespaceIndex) -> None:
        """Queue the snapshot of an index being dropped, when snapshots are kept and it changed since its last."""
        if self.snapshots is not None:
            self.snapshots.save_later(ns, index)

    def start_preload(self) -> None:
        """Run `preload` on a thread of its own (a starting server calls it; `close` stops it). A no-op without
        snapshots or with preload_nodes 0."""
        if self.snapshots is None or self.preload_nodes <= 0 or self._preloader is not None:
            return
        self._preload, self._preload_started = PreloadState(done=False), time.perf_counter()
        self._preloader = threading.Thread(target=self.preload, name="pyramind-index-preload", daemon=True)
        self._preloader.start()

    def preload(self) -> PreloadState:
        """Read back the snapshots of the namespaces used last, newest first, and bring each current from the store
        (its source stamps, as a search would), while the held nodes stay within preload_nodes and max_nodes;
        skips a namespace already held (a request loaded it) and one too large for what is left. Blocking;
        returns what it did (also `preload_state`). A namespace that fails to load is left to its first search."""
        started = time.perf_counter()
        if not self._preload_started:
            self._preload_started = started
        self._preload.done = False
        found = [] if self.snapshots is None or self.preload_nodes <= 0 else self.snapshots.recent()
        first = time.monotonic()  # marked used before anything a request touches from now on, newest first
        left = self.preload_nodes
        for rank, (ns, nodes) in enumerate(found):
            if self._closing.is_set() or left <= 0:
                break
            if nodes > left:
                continue
            loaded = self._preload_one(ns, nodes, first - (rank + 1) * 1e-3)
            left -= loaded
            if loaded:
                self._preload.namespaces += 1
                self._preload.nodes += loaded
        self._preload.done = True
        self._preload.seconds = time.perf_counter() - self._preload_started
        return self.preload_state()

    def _preload_one(self, ns: str, nodes: int, used: float) -> int:
        """Preload one namespace whose snapshot holds `nodes` nodes, marked used at `used`: the nodes now held, 0
        when skipped (held already, or no room without dropping an index) or when its load failed."""
        with self._guard:
            if ns in self._indexes or sum(len(ix) for ix in self._indexes.values()) + nodes > self.max_nodes:
                return 0
            index = self._indexes[ns] = NamespaceIndex(self.dimension, self.ann_min_rows)
            index.used = used
        forgets = 0 if self.snapshots is None else self.snapshots.forgets(ns)  # read before the version
        try:
            token = self.storage.namespace_version(ns)
            with index.lock:
                if token != index.token:
                    self._current(ns, index, token, forgets, load="preload")
                return len(index)
        except Exception:  # its first search loads it (and says why it cannot)
            log.warning("could not preload the index of a namespace", exc_info=True)
            with self._guard:
                if self._indexes.get(ns) is index:
                    del self._indexes[ns]
            return 0

    def preload_state(self) -> PreloadState:
        """What the start's preload did so far (a copy; seconds up to now while it runs)."""
        state = PreloadState(**vars(self._preload))
        if not state.done:
            state.seconds = time.perf_counter() - self._preload_started
        return state

    def close(self) -> None:
        """Stop the preload, mark the held indexes' snapshots with their last use (the next start preloads the
        namespaces used last first), and finish the snapshot writes queued (none are queued after). Once: a second
        call does nothing."""
        if self._closing.is_set():
            return
        self._closing.set()
        if self._preloader is not None:
            self._preloader.join()
        self._ahead.shutdown(wait=True)
        if self.snapshots is not None:
            now, wall = time.monotonic(), time.time()
            self.snapshots.settle()  # the writes queued first: touched after, each file holds its index's last use
            with self._guard:
                used = {ns: wall - max(0.0, now - ix.used) for ns, ix in self._indexes.items() if ix.token}
            self.snapshots.touch(used)
            self.snapshots.close()

    def forgotten(self, ns: str) -> None:
        """A forget of namespace `ns` was committed: its snapshot, if any, leaves the disk now (Snapshots.discard).
        The index held, if any, stops mapping that file (`NamespaceIndex.unmap`) and is brought current by its next
        search as after any commit."""
        if self.snapshots is not None:
            self.snapshots.discard(ns)  # first: a snapshot write takes the files' lock, then the index's
            index = self.held_index(ns)
            if index is not None:
                with index.lock:
                    index.unmap()

    def held_index(self, ns: str) -> NamespaceIndex | None:
        """The namespace's index when one is held and loaded (as of the version its last search read), else None;
        never loads, refreshes or marks it used."""
        with self._guard:
            index = self._indexes.get(ns)
        return index if index is not None and index.token is not None else None

    def drop(self, ns: str) -> None:
        """Forget the namespace's index (it is loaded again by its next search)."""
        with self._guard:
            self._indexes.pop(ns, None)
