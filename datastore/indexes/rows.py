"""The per-row bookkeeping shared by the namespace's in-memory indexes (vectors, BM25).

Rows are keyed by the store's integer row id, kept in ascending order (the store hands out increasing ids), so a
set of row ids maps to positions with one `searchsorted`. Each row carries its level and time range (POSIX
seconds, NaN for none), so those filters need no database, and a live flag: removal marks a row dead, and a
subclass compacts once a quarter of the rows are dead. A subclass names its own per-row arrays in `EXTRA`; they
grow and are compacted with the shared ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

_GROW = 1.5


class RowTable:
    """Row ids, levels, time ranges and live flags of one namespace's rows. Not thread-safe: callers lock."""

    COLUMNS = ("rowids", "levels", "starts", "ends", "alive")
    EXTRA: tuple[str, ...] = ()  # the subclass's own per-row arrays (first axis = rows)

    def __init__(self) -> None:
        self.size = 0  # rows held, dead ones included
        self.dead = 0
        self.rowids = np.zeros(0, dtype=np.int64)
        self.levels = np.zeros(0, dtype=np.int16)
        self.starts = np.zeros(0, dtype=np.float64)
        self.ends = np.zeros(0, dtype=np.float64)
        self.alive = np.zeros(0, dtype=bool)

    def __getstate__(self) -> dict[str, object]:
        """For a snapshot: the columns cut to the rows held (no spare capacity written)."""
        state = dict(self.__dict__)
        for name in self.COLUMNS + self.EXTRA:
            state[name] = getattr(self, name)[: self.size]
        return state

    def _reserve(self, extra: int, exact: bool = False) -> None:
        need = self.size + extra
        if need <= len(self.rowids):
            return
        cap = need if exact else max(need, int(len(self.rowids) * _GROW) + 16)
        for name in self.COLUMNS + self.EXTRA:
            old = getattr(self, name)
            new = np.zeros((cap, *old.shape[1:]), dtype=old.dtype)
            new[: self.size] = old[: self.size]
            setattr(self, name, new)

    def reserve(self, rows: int) -> None:
        """Make room for exactly `rows` more rows at once (a bulk load then grows nothing, and a loaded index holds
        no spare rows: growing by half left up to a third of a 125k-node matrix unused)."""
        self._reserve(rows, exact=True)

    def _append(
        self,
        rowids: Sequence[int] | np.ndarray,
        levels: Iterable[int] | np.ndarray,
        starts: Iterable[float] | np.ndarray,
        ends: Iterable[float] | np.ndarray,
    ) -> tuple[slice, np.ndarray]:
        """Append rows (ids greater than every id held, distinct; raises ValueError otherwise), filling the shared
        columns. Returns (the new rows' slice, the order that sorts the inputs by id): the caller fills its own
        columns at `slice` with its inputs taken in `order`."""
        order = np.argsort(np.asarray(rowids, dtype=np.int64), kind="stable")
        ids = np.asarray(rowids, dtype=np.int64)[order]
        if self.size and len(ids) and ids[0] <= self.rowids[self.size - 1]:
            raise ValueError("row ids must increase")
        if np.any(np.diff(ids) <= 0):
            raise ValueError("row ids must be distinct")
        n = len(ids)
        self._reserve(n)
        sl = slice(self.size, self.size + n)
        self.rowids[sl] = ids
        self.levels[sl] = np.asarray(levels)[order]
        self.starts[sl] = np.asarray(starts, dtype=np.float64)[order]
        self.ends[sl] = np.asarray(ends, dtype=np.float64)[order]
        self.alive[sl] = True
        self.size += n
        return sl, order

    def _positions(self, rowids: np.ndarray) -> np.ndarray:
        """Positions of the live rows among `rowids` (sorted int64; unknown ids dropped)."""
        if self.size == 0 or len(rowids) == 0:
            return np.zeros(0, dtype=np.int64)
        ids = self.rowids[: self.size]
        pos = np.minimum(np.searchsorted(ids, rowids), self.size - 1)
        pos = pos[ids[pos] == rowids]
        alive: np.ndarray = pos[self.alive[pos]]
        return alive

    def _mark_dead(self, rowids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Mark rows dead (unknown ids are ignored); returns their positions."""
        pos = self._positions(np.sort(np.asarray(rowids, dtype=np.int64)))
        self.alive[pos] = False
        self.dead += len(pos)
        return pos

    def _needs_compaction(self) -> bool:
        return self.dead > 1024 and self.dead * 4 > self.size

    def _keep_rows(self, keep: np.ndarray) -> None:
        """Keep only the rows at positions `keep` (ascending), in every column, renumbering positions."""
        for name in self.COLUMNS + self.EXTRA:
            setattr(self, name, getattr(self, name)[keep].copy())
        self.size, self.dead = len(keep), 0

    def _in_bounds(
        self,
        at: slice | np.ndarray,
        min_level: int | None,
        max_level: int | None,
        start: float | None,
        end: float | None,
    ) -> np.ndarray:
        """Boolean mask over the rows `at` (positions or a slice) whose level and time range pass the bounds:
        level within [min_level, max_level], ending at or after `start`, starting at or before `end`."""
        levels = self.levels[at]
        mask = np.ones(len(levels), dtype=bool)
        if min_level is not None:
            mask &= levels >= min_level
        if max_level is not None:
            mask &= levels <= max_level
        if start is not None:
            mask &= self.ends[at] >= start
        if end is not None:
            mask &= self.starts[at] <= end
        return mask

    def __len__(self) -> int:
        return self.size - self.dead
