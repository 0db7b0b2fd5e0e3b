"""Snapshots of namespace indexes on local disk (INDEX_SNAPSHOT_DIR): a cold namespace is read back in one file
instead of listed from the store and indexed again, after a restart or after an eviction.

A snapshot is one `NamespaceIndex` as it was (vectors as float32 blocks, BM25 postings already cut and stemmed,
the node ids as one array, each source's, speaker's and session's rows, the IVF index serialised by faiss),
pickled into `<dir>/<store>/<namespace hash>.idx`, where `<store>` names the store it came from (provider and
location, hashed), so two stores never share one. It is never taken as current: a restored index keeps the
source stamps it was written with and is refreshed like any other (`NamespaceIndexes._refresh`): the sources
whose stamp changed since, or that appeared or went away, are dropped and listed again. So a snapshot only saves
work; what a search finds is the store's.

Written off the request path (one writer thread): after a namespace is loaded from the store, and when an index
is dropped (evicted, idle) holding changes its snapshot lacks; only an index of `min_nodes` nodes or more
(INDEX_SNAPSHOT_MIN_NODES: below it a listing is as quick as a read). A file is written under a temporary name and
renamed, so a reader never sees half of one; one that cannot be read (torn, from another version) is ignored and
removed. The folder is this server's own: pickles run code when read, so it must be writable by the server alone.

A file is a header pickle `(FORMAT, namespace, nodes)`, so the files can be listed with their namespaces and sizes
without reading an index (`recent`: what a starting server preloads, newest first by the file's modification time:
set to the index's last use when it is written, on a load or a drop, and by `touch` as the server closes); then a
pickle `(index pickle's length, [array buffer lengths])`; then the index pickled with protocol 5, its arrays' memory
out of band; then those buffers, each at a 64-byte boundary of the file. A read maps the file (private, copy on
write: a row the index marks dead never reaches the file) and the arrays are views of the mapping: their memory is
neither copied nor allocated, and a page is read when a search first touches it (a cold 2k-node namespace of 10,000
lines, 22.8 MB: read in a median 16 ms instead of 27-31, and 3 ms since the node ids are arrays too; the first
/context of a 125k-node one after a restart 0.40-0.48 s instead of 0.95-1.09: bench/RESULTS.md, stop13-notes and
stop14-notes). A file replaced or removed while mapped stays
readable to the index holding it (POSIX: the mapping keeps its pages) until that index is dropped; one cut or
rewritten in place would not be, so the server only ever writes a new file and renames it, and nothing else may
write into the folder. An index about to drop rows (a forget, a changed source: `NamespaceIndex.unmap`) first copies
its mapped arrays into memory of its own, so a removed file's pages, which may hold forgotten vectors, are released
rather than kept by the mapping.

A forget (`discard`, called by the deleter after its commit, before the forget is acknowledged) removes the
namespace's file and counts one more forget of it. An index remembers the count as of which it was last brought
current (`NamespaceIndex.forgets_seen`, set by `NamespaceIndexes.get` from a count read before the store's version);
a write of an index that has not seen every forget is skipped, and the check and the write happen under the lock
`discard` takes, so no write queued or in progress before a forget puts the forgotten text back on disk. An index
drops a removed row by marking it dead (its vector and postings stay in memory until a quarter of the rows are
dead), so it is compacted before it is written (`NamespaceIndex.compact`): the next file holds no forgotten row's
vector, postings or node id, and its vocabulary no term that only forgotten rows held.
"""

from __future__ import annotations

import gc
import hashlib
import logging
import mmap
import os
import pickle
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from datastore.indexes.namespaces import NamespaceIndex

log = logging.getLogger(__name__)
ALIGN = 64  # each array buffer of a snapshot starts at a multiple of this in the file (numpy's and SIMD's wish)
FORMAT = 4  # bumped when NamespaceIndex's layout changes: older snapshots are then ignored


def mapped(array: np.ndarray) -> bool:
    """Whether `array`'s memory is a view of a mapped snapshot file (its chain of bases ends in an mmap)."""
    base: object = array
    while isinstance(base, np.ndarray | memoryview):
        base = base.base if isinstance(base, np.ndarray) else base.obj
    return isinstance(base, mmap.mmap)


@contextmanager
def no_collection() -> Iterator[None]:
    """Python's cyclic garbage collector paused inside (it is enabled again at the end unless it was off). An
    unpickled index is many new containers (each source's, speaker's and session's rows); each collection pass the
    allocations trigger scans all of them again: at 125k nodes reading a snapshot took 1.1-2.3 s collected, 0.6 s
    paused (bench/RESULTS.md, many users). What it allocates holds no cycles."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Snapshots:
    """The snapshot files of one store's namespaces under `folder` (created when missing).

    store: what identifies the store (provider and location); its hash names the subfolder. min_nodes:
    INDEX_SNAPSHOT_MIN_NODES (smaller indexes are not written)."""

    def __init__(self, folder: Path, store: str, min_nodes: int = 0) -> None:
        self.folder = Path(folder).expanduser() / hashlib.sha256(store.encode()).hexdigest()[:16]
        self.folder.mkdir(parents=True, exist_ok=True)
        self.min_nodes = min_nodes
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="pyramind-index-snapshot")
        self._written: dict[str, str | None] = {}  # namespace -> token of its snapshot on disk, as far as known
        self._forgets: dict[str, int] = {}  # namespace -> forgets discarded so far (`discard`)
        self._guard = threading.Lock()
        self._files = threading.Lock()  # a write's check and rename, or a discard: one at a time

    def path(self, ns: str) -> Path:
        """The file of namespace `ns` (named by a hash: any namespace string is a safe file name)."""
        return self.folder / f"{hashlib.sha256(ns.encode()).hexdigest()[:32]}.idx"

    def read(self, ns: str) -> NamespaceIndex | None:
        """The namespace's index as last written, or None (no file, or one that cannot be read: then removed)."""
        path = self.path(ns)
        try:
            with open(path, "rb") as f, no_collection():
                version, stored_ns, _nodes = pickle.load(f)
                if version != FORMAT or stored_ns != ns:
                    raise ValueError("another format or namespace")
                size, lengths = pickle.load(f)
                start = f.tell()
                view = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY))  # private: never written back
                buffers, at = [], start + size
                for length in lengths:
                    at += -at % ALIGN
                    buffers.append(view[at : at + length])
                    at += length
                if at > len(view):
                    raise ValueError("a torn snapshot")
                index = pickle.loads(view[start : start + size], buffers=buffers)
        except FileNotFoundError:
            return None
        except Exception:  # torn or foreign: never trusted, never read again
            log.warning("ignoring the unreadable index snapshot %s", path, exc_info=True)
            path.unlink(missing_ok=True)
            return None
        with self._guard:
            self._written[ns] = index.token
        return index  # type: ignore[no-any-return]

    def recent(self) -> list[tuple[str, int]]:
        """[(namespace, nodes)] of every snapshot on disk, the most recently written or touched first (only each
        file's header is read; a file that cannot be read is skipped, and a file of another format removed)."""
        found: list[tuple[float, str, int]] = []
        for path in self.folder.glob("*.idx"):
            try:
                modified = path.stat().st_mtime
                with open(path, "rb") as f:
                    header = pickle.load(f)
                version, ns, nodes = header
            except FileNotFoundError:  # removed meanwhile (a forget)
                continue
            except Exception:  # torn, or of another format: `read` would ignore it too
                log.warning("ignoring the unreadable index snapshot %s", path, exc_info=True)
                path.unlink(missing_ok=True)
                continue
            if version == FORMAT and isinstance(ns, str) and self.path(ns) == path:
                found.append((modified, ns, int(nodes)))
        found.sort(key=lambda f: f[0], reverse=True)
        return [(ns, nodes) for _, ns, nodes in found]

    def touch(self, last_used: dict[str, float]) -> None:
        """Set the modification time of the snapshots of these namespaces to {namespace: when it was last used,
        Unix seconds}, so `recent` orders them by use (a server closing calls it for the indexes it held)."""
        with self._files:
            for ns, at in last_used.items():
                try:
                    os.utime(self.path(ns), (at, at))
                except FileNotFoundError:  # none written (too small, forgotten)
                    continue

    def forgets(self, ns: str) -> int:
        """How many forgets of namespace `ns` were discarded so far (read before the store's version, an index
        brought current as of that version has seen them: `NamespaceIndex.forgets_seen`)."""
        with self._guard:
            return self._forgets.get(ns, 0)

    def discard(self, ns: str) -> None:
        """A forget of namespace `ns` was committed: its snapshot file is removed now (waiting for a write in
        progress), and no index brought current before this call is written again."""
        with self._files:
            with self._guard:
                self._forgets[ns] = self._forgets.get(ns, 0) + 1
                self._written.pop(ns, None)
            self.path(ns).unlink(missing_ok=True)

    def save_later(self, ns: str, index: NamespaceIndex) -> Future[None] | None:
        """Write the index's snapshot on the writer thread unless the file already holds its token, or the index
        holds fewer than `min_nodes` nodes (None then)."""
        with self._guard:
            if index.token is None or self._written.get(ns) == index.token or len(index) < self.min_nodes:
                return None
            self._written[ns] = index.token
        return self._writer.submit(self._save, ns, index)

    def _save(self, ns: str, index: NamespaceIndex) -> None:
        path = self.path(ns)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            with self._files, index.lock:
                if index.token is None or index.forgets_seen < self.forgets(ns):
                    # dropped half refreshed, or not current since a forget: nothing to write (the next will)
                    with self._guard:
                        if self._written.get(ns) == index.token:
                            self._written.pop(ns, None)
                    return
                index.compact()  # no dead row (a forgotten one's vector, postings, node id) is written
                buffers: list[pickle.PickleBuffer] = []
                pickled = pickle.dumps(index, protocol=5, buffer_callback=buffers.append)
                raws = [b.raw() for b in buffers]
                with open(tmp, "wb") as f:
                    pickle.dump((FORMAT, ns, len(index)), f, protocol=pickle.HIGHEST_PROTOCOL)
                    pickle.dump((len(pickled), [r.nbytes for r in raws]), f, protocol=pickle.HIGHEST_PROTOCOL)
                    f.write(pickled)
                    for raw in raws:
                        f.write(bytes(-f.tell() % ALIGN))
                        f.write(raw)
                used = time.time() - max(0.0, time.monotonic() - index.used)  # its last use, Unix seconds
                os.utime(tmp, (used, used))
                os.replace(tmp, path)
        except Exception:  # a snapshot only saves work: the next load reads the store
            log.warning("could not write the index snapshot of a namespace", exc_info=True)
            with self._guard:
                self._written.pop(ns, None)
        finally:
            tmp.unlink(missing_ok=True)

    def settle(self) -> None:
        """Wait for the writes queued so far."""
        self._writer.submit(lambda: None).result()

    def close(self) -> None:
        """Finish the writes queued, then stop the writer thread."""
        self._writer.shutdown(wait=True)
