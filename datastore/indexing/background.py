"""The background indexer: `remember` stores messages and answers; this makes them searchable, then summarised.

Two lanes over the store's backlog, on a thread pool of their own (so request threads stay free):
- the chunk lane cuts and embeds chunks (`IndexSteps.chunks`, at most INDEX_CHUNK_BATCH chunks per step, one
  step at a time, `embed(..., bulk=True)`); chunks are searchable as soon as their step commits;
- the summary lane rolls complete groups up into summaries (`IndexSteps.summaries`), INDEX_SUMMARY_CONCURRENCY
  sources at once, so a slow LLM summariser does not serialise every conversation; with an instruction detector
  that calls a model, it also reads the chunked messages for standing instructions (`IndexSteps.detect`).
Both take sources round-robin across namespaces, then sources: one caller's big backlog is worked on one
bounded step at a time, between the steps of everyone else's. A namespace whose unindexed backlog exceeds
MAX_PENDING_TOKENS gets 429 with Retry-After instead of queueing more.

The backlog lives in the store, not in memory: at start (and every PENDING_RETRY_SECONDS) the indexer asks the
store for sources with messages past their last chunk (`Storage.backlog`), groups not yet summarised
(`Storage.unrolled`) or chunked messages not yet read by a deferred detector (`IndexSteps.unread`: at start,
and at each scan while the detector calls a model), so a restart, a crash or an embedder outage loses nothing.
`remember(..., wait=True)` drives the caller's own source to the end (chunks, summaries, deferred detection)
before answering, within REMEMBER_WAIT_SECONDS.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import threading
import time
import weakref
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from datastore.indexing.steps import IndexSteps, Step
from datastore.storage import Storage
from datastore.write.remember import Writer
from models.api import RememberRequest, RememberResponse
from models.settings import Settings
from services.errors import BacklogFullError, PyramindError

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, source id)
STOP_GRACE = 5.0  # seconds a stopping server waits for the indexing steps in flight
T = TypeVar("T")


def _lower_priority(nice: int) -> None:
    """Run this indexer thread at a lower CPU priority (Linux nice applies per thread), so that requests and
    queries get the cores first while background embedding waits; a no-op where that is not possible."""
    if nice:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
        except (AttributeError, OSError):
            pass


class RoundRobin:
    """A queue of sources, taken one namespace after another (then in arrival order within a namespace);
    a source queued twice is queued once."""

    def __init__(self) -> None:
        self._by_ns: dict[str, deque[str]] = {}
        self._order: deque[str] = deque()
        self._members: set[Key] = set()

    def add(self, key: Key) -> None:
        if key in self._members:
            return
        self._members.add(key)
        ns, sid = key
        if ns not in self._by_ns:
            self._by_ns[ns] = deque()
            self._order.append(ns)
        self._by_ns[ns].append(sid)

    def pop(self) -> Key | None:
        if not self._order:
            return None
        ns = self._order.popleft()
        sid = self._by_ns[ns].popleft()
        if self._by_ns[ns]:
            self._order.append(ns)
        else:
            del self._by_ns[ns]
        self._members.discard((ns, sid))
        return ns, sid

    def __len__(self) -> int:
        return len(self._members)


class _Locks:
    """One asyncio.Lock per source, made on first use; a lock nobody holds or awaits is dropped (the table holds
    weak references), so the table does not grow with every source ever indexed."""

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[Key, asyncio.Lock] = weakref.WeakValueDictionary()

    def __getitem__(self, key: Key) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    def __len__(self) -> int:
        return len(self._locks)


class _Lane:
    """A queue, the per-source locks of one phase, and the sources to take again once their holder is done."""

    def __init__(self) -> None:
        self.queue = RoundRobin()
        self.wake = asyncio.Event()
        self.locks = _Locks()
        self.again: set[Key] = set()

    def add(self, key: Key) -> None:
        self.queue.add(key)
        self.wake.set()

    async def next(self) -> Key:
        while True:
            self.wake.clear()
            key = self.queue.pop()
            if key is None:
                await self.wake.wait()
                continue
            if self.locks[key].locked():  # someone works on it now; take it again after them
                self.again.add(key)
                continue
            return key

    def release(self, key: Key, more: bool) -> None:
        if more or key in self.again:
            self.again.discard(key)
            self.add(key)


@dataclass(frozen=True)
class IndexingState:
    """What the indexer holds now, for monitoring (server/metrics.py). chunk_sources: sources with messages not
    yet searchable, as far as this process knows (accepted here, or found by a scan). summary_sources: sources
    queued for the summary lane. backlog_tokens: their unindexed tokens (estimated at 4 characters a token until a
    step counts them; a source found by a scan counts once its first step ran). lag_seconds: how long the oldest
    of chunk_sources has waited (since it was accepted or found), 0.0 when none waits. failures: failed steps and
    scans since start, by error code (`internal_error` for an unexpected exception)."""

    chunk_sources: int
    summary_sources: int
    backlog_tokens: int
    lag_seconds: float
    failures: dict[str, int]


class Indexer:
    """Indexes the store's backlog in the background; see the module docstring. `start()` / `stop()` from the
    app's serving hooks; `remember()` is what the HTTP route calls.

    settings: INDEX_SUMMARY_CONCURRENCY, INDEX_NICE, MAX_PENDING_TOKENS, REMEMBER_WAIT_SECONDS,
    PENDING_RETRY_SECONDS. writer: stores accepted messages. steps: the indexing steps. storage: where the
    backlog is found (`backlog`, `unrolled`).
    """

    def __init__(self, settings: Settings, writer: Writer, steps: IndexSteps, storage: Storage) -> None:
        self.settings = settings
        self.writer = writer
        self.steps = steps
        self.storage = storage
        self.chunks = _Lane()
        self.summaries = _Lane()
        self.backlog: dict[Key, int] = {}  # unindexed tokens per source (estimated on accept, exact after a step)
        self.waiting_since: dict[Key, float] = {}  # monotonic time each source with a backlog was accepted or found
        self.failures: Counter[str] = Counter()  # failed steps and scans by error code (IndexingState)
        self._rate = 2000.0  # tokens/s the chunk lane indexes (moving average), for Retry-After
        self._executor = ThreadPoolExecutor(
            settings.index_summary_concurrency + 2,
            "pyramind-indexer",
            initializer=_lower_priority,
            initargs=(settings.index_nice,),
        )
        self._tasks: list[asyncio.Task[Any]] = []
        self._running: set[asyncio.Task[Any]] = set()
        self._in_flight: set[Future[Any]] = set()
        self._in_flight_guard = threading.Lock()
        self._scanned = False  # whether a scan has looked for unread messages yet (always at start)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Start the lanes and the backlog scan (the first scan runs at once)."""
        self._tasks = [
            asyncio.create_task(self._chunk_lane(), name="pyramind-chunk-lane"),
            asyncio.create_task(self._summary_lane(), name="pyramind-summary-lane"),
            asyncio.create_task(self._scan_loop(), name="pyramind-backlog-scan"),
        ]

    async def stop(self, grace: float = STOP_GRACE) -> None:
        """Cancel the lanes and the steps not yet started, then wait for the steps already running: each is
        bounded (INDEX_CHUNK_BATCH chunks, or their summaries) and commits whole or not at all, and the store is
        closed after `stop` returns, so none may be left running on it. After `grace` seconds the wait is
        logged (a slow summariser on a saturated machine) and goes on."""
        for task in self._tasks + list(self._running):
            task.cancel()
        await asyncio.gather(*self._tasks, *self._running, return_exceptions=True)
        self._executor.shutdown(wait=False, cancel_futures=True)  # queued steps never start
        with self._in_flight_guard:
            in_flight = [asyncio.wrap_future(f) for f in self._in_flight if not f.done()]
        if in_flight:
            _, pending = await asyncio.wait(in_flight, timeout=grace)
            if pending:
                log.warning(
                    "indexer: waiting for %d step(s) still running after %.0f s before the store closes "
                    "(each commits whole or not at all)",
                    len(pending),
                    grace,
                )
                await asyncio.wait(pending)

    async def scan(self) -> int:
        """Queue every source the store reports with a backlog, an unsummarised group or (at the first scan, and
        while the detector is deferred) unread messages; returns how many."""
        backlog = await self._run(self.storage.backlog)
        unrolled = await self._run(self.storage.unrolled)
        if not self._scanned or self.steps.instructions.deferred:
            unrolled = [*unrolled, *await self._run(self.steps.unread)]
            self._scanned = True
        now = time.monotonic()
        for key in backlog:
            self.waiting_since.setdefault(key, now)
            self.chunks.add(key)
        for key in unrolled:
            self.summaries.add(key)
        return len(set(backlog) | set(unrolled))

    def state(self) -> IndexingState:
        """The backlog, its lag and the failures so far (see IndexingState); cheap, read at each metrics scrape."""
        now = time.monotonic()
        oldest = min(self.waiting_since.values(), default=now)
        return IndexingState(
            chunk_sources=len(self.waiting_since),
            summary_sources=len(self.summaries.queue),
            backlog_tokens=sum(self.backlog.values()),
            lag_seconds=max(0.0, now - oldest),
            failures=dict(self.failures),
        )

    # ------------------------------------------------------------------ what the route calls
    def check_backlog(self, ns: str) -> None:
        """Raise BacklogFullError (with the seconds to wait) when the namespace's unindexed backlog exceeds
        MAX_PENDING_TOKENS."""
        cap = self.settings.max_pending_tokens
        pending = sum(t for (n, _), t in self.backlog.items() if n == ns)
        if cap and pending > cap:
            wait = min(60, max(1, math.ceil((pending - cap) / self._rate)))
            raise BacklogFullError(
                f"namespace {ns!r} has {pending} tokens waiting to be indexed (MAX_PENDING_TOKENS={cap}); "
                f"retry in {wait} s",
                retry_after=wait,
            )

    async def remember(self, ns: str, req: RememberRequest) -> tuple[RememberResponse, int]:
        """Store the messages now (one transaction), index them in the background. Returns (response, status):
        202 with `pending_message_ids` (stored, not yet searchable), 200 when nothing new was stored or, with
        `req.wait`, once the messages' chunks and summaries are committed (their ids in the response). A wait
        that outlasts REMEMBER_WAIT_SECONDS, or an embedder failure, answers 202: the messages are kept and
        indexed in the background. Raises BacklogFullError, InvalidRequestError, ConflictError."""
        self.check_backlog(ns)
        open_before = None
        if req.wait and req.conversation_id:
            open_before = await asyncio.to_thread(self.steps.open_chunk_id, ns, req.conversation_id)
        resp = await asyncio.to_thread(self.writer.accept, ns, req)
        if not resp.pending_message_ids:
            return resp, 200
        key = (ns, resp.conversation_id)
        chars = sum(len(m.content) for m in req.messages) * len(resp.pending_message_ids) // len(req.messages)
        self.backlog[key] = self.backlog.get(key, 0) + chars // 4  # ~4 characters a token until a step counts
        self.waiting_since.setdefault(key, time.monotonic())
        if not req.wait:
            self.chunks.add(key)
            return resp, 202
        drain = asyncio.create_task(self._drain(key))
        self._running.add(drain)
        drain.add_done_callback(self._finished)
        try:
            await asyncio.wait_for(asyncio.shield(drain), self.settings.remember_wait_seconds)
        except TimeoutError:
            log.warning("indexing %r took over %.0f s; answering 202", key, self.settings.remember_wait_seconds)
            return resp, 202
        except PyramindError as exc:
            log.warning("indexing %r failed (%s); its messages stay pending", key, exc.message)
            return resp, 202
        created, updated, summaries, pending = await asyncio.to_thread(
            self.steps.indexed_view, ns, resp.conversation_id, resp.pending_message_ids, open_before
        )
        resp = resp.model_copy(
            update={
                "chunk_ids": created,
                "updated_chunk_ids": updated,
                "summary_ids": summaries,
                "pending_message_ids": pending,
            }
        )
        return resp, 202 if pending else 200

    # ------------------------------------------------------------------ the work
    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._running.discard(task)
        if not task.cancelled() and task.exception() is not None and not isinstance(task.exception(), PyramindError):
            log.error("indexing failed", exc_info=task.exception())

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        future = self._executor.submit(fn, *args)
        with self._in_flight_guard:
            self._in_flight.add(future)
        future.add_done_callback(self._done)
        try:
            return await asyncio.wrap_future(future)
        except PyramindError as exc:  # every step and scan runs here: each failure is counted once, by its code
            self.failures[exc.code] += 1
            raise
        except Exception:
            self.failures["internal_error"] += 1
            raise

    def _done(self, future: Future[Any]) -> None:  # in the worker thread
        with self._in_flight_guard:
            self._in_flight.discard(future)

    async def _chunk_step(self, key: Key) -> Step:
        t0 = time.monotonic()
        before = self.backlog.get(key, 0)
        step = await self._run(self.steps.chunks, *key)
        self.backlog[key] = step.backlog_tokens
        if not step.backlog_tokens:
            self.backlog.pop(key, None)
            self.waiting_since.pop(key, None)
        done = before - step.backlog_tokens
        if step.created and done > 0:
            self._rate = 0.8 * self._rate + 0.2 * done / max(time.monotonic() - t0, 1e-3)
        if step.rollable or step.unread:
            self.summaries.add(key)
        return step

    async def _slow_step(self, key: Key) -> Step:
        """One step of the summary lane for a source: a deferred detector's reading (`IndexSteps.detect`, a no-op
        without its mark), then a roll-up (`IndexSteps.summaries`); `more` when either has work left."""
        read = await self._run(self.steps.detect, *key)
        step = await self._run(self.steps.summaries, *key)
        return replace(step, instructions=read.instructions, more=step.more or read.more)

    async def _drain(self, key: Key) -> None:
        """Index one source to the end, chunks then summaries and deferred detection (a `wait: true` remember).
        Raises PyramindError when chunking fails; a later failure is logged (the chunks are searchable; the scan
        retries)."""
        async with self.chunks.locks[key]:
            more = True
            try:
                while more:
                    more = (await self._chunk_step(key)).more
            finally:
                self.chunks.release(key, False)
        async with self.summaries.locks[key]:
            try:
                more = True
                while more:
                    more = (await self._slow_step(key)).more
            except PyramindError as exc:
                log.warning("summarising %r failed (%s); retried later", key, exc.message)
            finally:
                self.summaries.release(key, False)

    async def _chunk_lane(self) -> None:
        while True:
            key = await self.chunks.next()
            more = False
            async with self.chunks.locks[key]:
                try:
                    more = (await self._chunk_step(key)).more
                except PyramindError as exc:  # the backlog stays in the store; the next scan retries
                    log.warning("indexing %r failed (%s); retried at the next scan", key, exc.message)
                except Exception:
                    log.exception("indexing %r failed; retried at the next scan", key)
            self.chunks.release(key, more)

    async def _summary_lane(self) -> None:
        slots = asyncio.Semaphore(self.settings.index_summary_concurrency)
        while True:
            key = await self.summaries.next()
            await slots.acquire()
            task = asyncio.create_task(self._summarise(key, slots))
            self._running.add(task)
            task.add_done_callback(self._finished)

    async def _summarise(self, key: Key, slots: asyncio.Semaphore) -> None:
        more = False
        try:
            async with self.summaries.locks[key]:
                try:
                    more = (await self._slow_step(key)).more
                except PyramindError as exc:
                    log.warning("summarising %r failed (%s); retried at the next scan", key, exc.message)
                except Exception:
                    log.exception("summarising %r failed; retried at the next scan", key)
        finally:
            slots.release()
        self.summaries.release(key, more)

    async def _scan_loop(self) -> None:
        every = self.settings.pending_retry_seconds
        while True:
            try:
                found = await self.scan()
                if found:
                    log.info("indexer: %d sources with work found in the store", found)
            except Exception:  # keep serving; the next scan retries
                log.exception("scanning the store for its backlog failed")
            if every <= 0:
                return
            await asyncio.sleep(every)
