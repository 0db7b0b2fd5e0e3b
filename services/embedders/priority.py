"""Query-first dynamic batching for a local model: queries never wait behind background indexing.

Callers hand texts to `PriorityBatcher.embed` and block until their vectors are ready. `workers` threads (started
on the first call) run the model; each takes, in this order:
1. up to `batch_size` texts from interactive calls (queries), oldest first, several calls batched together in
   one forward pass (4 queries cost far less together than one after another);
2. only when no interactive text waits: one slice of at most `bulk_batch` texts and about 256 word pieces from
   bulk calls (chunks and lines being indexed), oldest call first, the call's texts taken shortest first so
   that a slice pads little.
With two or more workers, bulk slices never occupy all of them: one is kept for queries (bulk runs on
`workers - 1` at once), so a query that arrives while a large bulk call runs starts at once; with one worker it
waits for at most one small slice (one 200-token chunk, or a few short texts), never for the whole bulk call.
A failing forward pass fails only the calls whose texts it held.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

import numpy as np

from services.errors import EmbeddingError

Encode = Callable[[list[str]], np.ndarray]
IDLE_EXIT_S = 30.0  # a worker idle this long ends (started again by the next call), so a dropped embedder is freed
BULK_SLICE_CHARS = 1000  # ~256 word pieces of English: what a waiting query may have to wait for, per worker


class _Call:
    """One `embed` call: its texts (shortest first), the vectors filled in as slices finish, and its outcome."""

    __slots__ = ("texts", "order", "next", "left", "out", "error", "done")

    def __init__(self, texts: list[str], dimension: int) -> None:
        self.texts = texts
        self.order = sorted(range(len(texts)), key=lambda i: len(texts[i]) if isinstance(texts[i], str) else 0)
        self.next = 0  # position in `order` of the first text not yet handed to a worker
        self.left = len(texts)  # texts whose vectors are not in yet
        self.out = np.zeros((len(texts), dimension), dtype=np.float32)
        self.error: EmbeddingError | None = None
        self.done = threading.Event()

    def fail(self, error: EmbeddingError) -> None:
        if self.error is None:
            self.error = error
        self.done.set()


class PriorityBatcher:
    """Runs `encode(texts) -> float32 (n, dimension)` on `workers` threads, interactive calls first.

    `encode` must be thread-safe (it is called from every worker at once). Errors it raises reach the callers as
    EmbeddingError (an EmbeddingError as it is, anything else as "local embedding failed: ...").
    """

    def __init__(
        self,
        encode: Encode,
        dimension: int,
        *,
        workers: int = 1,
        batch_size: int = 32,
        bulk_batch: int = 8,
        name: str = "embedder",
    ) -> None:
        self._encode = encode
        self._dimension = dimension
        self._workers = workers
        self._batch_size = batch_size
        self._bulk_batch = bulk_batch
        self._name = name
        self._cv = threading.Condition()
        self._queues: dict[bool, deque[_Call]] = {False: deque(), True: deque()}  # bulk? -> calls with texts left
        self._running = 0  # worker threads alive
        self._threads: list[threading.Thread] = []
        self._closing = False  # set by close(): idle workers end now instead of after IDLE_EXIT_S
        self._bulk_running = 0  # bulk slices being encoded now
        # with two or more workers, bulk work never holds them all: one stays free for a query that arrives
        self._bulk_max = max(1, workers - 1)

    def embed(self, texts: list[str], *, bulk: bool = False) -> np.ndarray:
        """float32 (len(texts), dimension); raises EmbeddingError. bulk: background work that yields to queries."""
        call = _Call(list(texts), self._dimension)
        if not texts:
            return call.out
        with self._cv:
            self._start()
            self._queues[bulk].append(call)
            self._cv.notify()
        call.done.wait()
        if call.error is not None:
            raise call.error
        return call.out

    def close(self, timeout: float = 5.0) -> None:
        """End the workers: each finishes the slice it runs, then ends; waits up to `timeout` seconds for them.
        A later `embed` starts workers again."""
        with self._cv:
            self._closing = True
            self._cv.notify_all()
            threads = list(self._threads)
        for t in threads:
            t.join(timeout)

    def _start(self) -> None:
        """Start workers up to `workers` (under the lock)."""
        self._closing = False
        self._threads = [t for t in self._threads if t.is_alive()]
        while self._running < self._workers:
            self._running += 1
            thread = threading.Thread(target=self._work, name=f"{self._name}-{self._running}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _take(self) -> tuple[list[tuple[_Call, list[int]]], bool]:
        """The next slice (under the lock) and whether it is bulk: interactive texts if any wait, else one bulk
        slice unless `_bulk_max` bulk slices already run (one worker is kept for queries); ([], False) if idle.

        A bulk slice holds at most `bulk_batch` texts and, past its first text, at most BULK_SLICE_CHARS
        characters (about 256 word pieces): one 200-token chunk runs alone, short texts run together."""
        for bulk, limit in ((False, self._batch_size), (True, self._bulk_batch)):
            if bulk and self._bulk_running >= self._bulk_max:
                break
            queue = self._queues[bulk]
            taken: list[tuple[_Call, list[int]]] = []
            room, chars = limit, 0
            while queue and room:
                call = queue[0]
                if call.error is not None:  # a failed call's other texts are not worth running
                    queue.popleft()
                    continue
                part: list[int] = []
                while room and call.next < len(call.order):
                    i = call.order[call.next]
                    size = len(call.texts[i]) if isinstance(call.texts[i], str) else 0
                    if bulk and chars and chars + size > BULK_SLICE_CHARS:
                        room = 0
                        break
                    part.append(i)
                    call.next += 1
                    room -= 1
                    chars += size
                if part:
                    taken.append((call, part))
                if call.next == len(call.order):
                    queue.popleft()
            if taken:
                self._bulk_running += bulk
                return taken, bulk
        return [], False

    def _work(self) -> None:
        while True:
            with self._cv:
                work, bulk = self._take()
                while not work:
                    if self._closing or not self._cv.wait(IDLE_EXIT_S) or self._closing:
                        work, bulk = self._take()
                        if not work:  # idle (or closing): end; the next call starts a worker again
                            self._running -= 1
                            return
                    else:
                        work, bulk = self._take()
            try:
                self._run(work)
            finally:
                if bulk:
                    with self._cv:
                        self._bulk_running -= 1
                        self._cv.notify()

    def _run(self, work: list[tuple[_Call, list[int]]]) -> None:
        live = [(call, part) for call, part in work if call.error is None]
        if not live:
            return
        try:
            vectors = self._encode([call.texts[i] for call, part in live for i in part])
        except Exception as exc:
            if len(live) > 1:  # find the call that broke it; the others still get their vectors
                for item in live:
                    self._run([item])
                return
            error = exc if isinstance(exc, EmbeddingError) else EmbeddingError(f"local embedding failed: {exc}")
            live[0][0].fail(error)
            return
        start = 0
        for call, part in live:
            call.out[part] = vectors[start : start + len(part)]
            start += len(part)
            with self._cv:
                call.left -= len(part)
                finished = call.left == 0
            if finished:
                call.done.set()
