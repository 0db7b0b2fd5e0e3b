"""The per-row bookkeeping shared by the namespace's in-memory indexes (vectors, BM25) and its node ids.

Rows are keyed by the index's integer row id, kept in ascending order (row ids are handed out increasing), so a
set of row ids maps to positions with one `searchsorted`. Each row carries a live flag (`RowIds`): removal marks a
row dead, and a subclass compacts once a quarter of the rows are dead. A search index's rows also carry their
level and time range (POSIX seconds, NaN for none: `RowTable`), so those filters need no database; `NodeIds`
carries each row's node id. A subclass names its own per-row arrays in `EXTRA`; they grow and are compacted with
the shared ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

_GROW = 1.5


class RowIds:
    """Row ids (ascending) and live flags, with any per-row columns a subclass names in `COLUMNS` and `EXTRA`:
    grown together, compacted together, cut to the rows held in a snapshot. Not thread-safe: callers lock."""

    COLUMNS: tuple[str, ...] = ("rowids", "alive")
    EXTRA: tuple[str, ...] = ()  # the subclass's own per-row arrays (first axis = rows)

    def __init__(self) -> None:
        self.size = 0  # rows held, dead ones included
        self.dead = 0
        self.rowids = np.zeros(0, dtype=np.int64)
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

    def _append_rows(self, rowids: Sequence[int] | np.ndarray) -> tuple[slice, np.ndarray]:
        """Append rows (ids greater than every id held, distinct; raises ValueError otherwise), live. Returns (the
        new rows' slice, the order that sorts the inputs by id): the caller fills its columns at `slice` with its
        inputs taken in `order`."""
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

    def compact(self) -> None:
        """Drop the dead rows now, whatever their share (a snapshot is written without them)."""
        if self.dead:
            self._keep_rows(np.flatnonzero(self.alive[: self.size]))

    def __len__(self) -> int:
        return self.size - self.dead


class RowTable(RowIds):
    """Row ids, levels, time ranges and live flags of one namespace's rows. Not thread-safe: callers lock."""

    COLUMNS = (*RowIds.COLUMNS, "levels", "starts", "ends")

    def __init__(self) -> None:
        super().__init__()
        self.levels = np.zeros(0, dtype=np.int16)
        self.starts = np.zeros(0, dtype=np.float64)
        self.ends = np.zeros(0, dtype=np.float64)

    def _append(
        self,
        rowids: Sequence[int] | np.ndarray,
        levels: Iterable[int] | np.ndarray,
        starts: Iterable[float] | np.ndarray,
        ends: Iterable[float] | np.ndarray,
    ) -> tuple[slice, np.ndarray]:
        """Append rows (`_append_rows`), filling the shared columns. Returns (the new rows' slice, the order that
        sorts the inputs by id): the caller fills its own columns at `slice` with its inputs taken in `order`."""
        sl, order = self._append_rows(rowids)
        self.levels[sl] = np.asarray(levels)[order]
        self.starts[sl] = np.asarray(starts, dtype=np.float64)[order]
        self.ends[sl] = np.asarray(ends, dtype=np.float64)[order]
        return sl, order

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


class NodeIds(RowIds):
    """The node id of each row of one namespace's index (lines included), as columns: row ids (int64, ascending:
    rows are handed out increasing), live flags and node ids (a numpy unicode array), so a snapshot holds no Python
    object per row and its read maps them (datastore/indexes/snapshots.py; as two dicts they were ~4 ms of a cold
    2k-node namespace's read, the GIL held). A removed row is marked dead (the columns compacted once a quarter
    is), so a refresh's remove and add cost what they touch. A node id is held by one live row at most (a moved
    node's old row is removed before its new one is added). The reverse map (node id -> row, `row_of`) is a dict
    built on its first use after a read (an add, a vectors lookup), never by a search. Not thread-safe: the
    NamespaceIndex's lock guards it."""

    EXTRA = ("ids",)

    def __init__(self) -> None:
        super().__init__()
        self.ids = np.zeros(0, dtype="<U1")
        self._row_of: dict[str, int] | None = {}

    def __getstate__(self) -> dict[str, object]:
        """For a snapshot: the columns cut to the rows held; the reverse map is built again when needed."""
        state = super().__getstate__()
        state["_row_of"] = None
        return state

    def row_of(self) -> dict[str, int]:
        """{node id: row} of every live row (built on first use, then kept current by `add` and `remove`)."""
        if self._row_of is None:
            live = self.alive[: self.size]
            ids, rows = self.ids[: self.size][live].tolist(), self.rowids[: self.size][live].tolist()
            self._row_of = dict(zip(ids, rows, strict=True))
        return self._row_of

    def add(self, rows: np.ndarray, ids: Sequence[str]) -> None:
        """Append rows (int64, above every row held, distinct) with their node ids (none of them held)."""
        if len(rows) == 0:
            return
        new = np.array(ids, dtype=str)
        width = np.promote_types(self.ids.dtype, new.dtype)
        if width != self.ids.dtype:  # a longer id than any held: the column widens
            self.ids = self.ids.astype(width)
        sl, order = self._append_rows(rows)
        self.ids[sl] = new[order]
        if self._row_of is not None:
            self._row_of.update(zip(ids, np.asarray(rows).tolist(), strict=True))

    def remove(self, rows: Sequence[int] | np.ndarray) -> None:
        """Drop these rows (unknown ones ignored)."""
        pos = self._mark_dead(rows)
        if self._row_of is not None:
            for node_id in self.ids[pos].tolist():
                self._row_of.pop(node_id, None)
        if self._needs_compaction():
            self._keep_rows(np.flatnonzero(self.alive[: self.size]))

    def of(self, rows: Sequence[int] | np.ndarray) -> list[str | None]:
        """The node id of each of `rows`, in their order; None for a row not held."""
        pos, found = self._find(rows)
        if self.size == 0:
            return [None] * len(pos)
        ids: list[str | None] = self.ids[pos].tolist()
        if not found.all():
            ids = [i if f else None for i, f in zip(ids, found.tolist(), strict=True)]
        return ids

    def held(self, rows: Sequence[int] | np.ndarray) -> list[str]:
        """The node id of each of `rows`, in their order; raises KeyError when one is not held."""
        pos, found = self._find(rows)
        if not found.all():
            raise KeyError("a row not held")
        ids: list[str] = self.ids[pos].tolist()
        return ids

    def _find(self, rows: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the position of each of `rows` in the columns, whether it is held there and live)."""
        wanted = np.asarray(rows, dtype=np.int64)
        if self.size == 0:
            return np.zeros(len(wanted), dtype=np.int64), np.zeros(len(wanted), dtype=bool)
        held = self.rowids[: self.size]
        pos = np.minimum(np.searchsorted(held, wanted), self.size - 1)
        return pos, (held[pos] == wanted) & self.alive[pos]
