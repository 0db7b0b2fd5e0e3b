"""What a memory shows in the block: a chunk's text made whole at both ends, cut to what is closest to the query.

A chunk is whole sentences, each message's with its speaker (services/chunking.py): `Texts.of` shows a short turn
that the chunk opens or closes inside whole, and takes the stamps (`[2024-03-15 09:00] `) out (the block writes
dates once, on its date lines). `Texts.piece` cuts
that text into units (services/excerpts: whole sentences, list items and code lines, each with its speaker) and
says which turns are short (`short_turn` tokens or less, datastore/context/policy.py, and whole: not the piece of
a long message a window starts or ends inside). `cut` keeps the units closest to the query (`…` where text was
left out): a short turn is kept or left whole, never cut to a sentence. `Shown` records what the block already
holds, so no line is shown twice: the fingerprint of every unit shown (the 20 tokens two chunks share, a recent
turn's sentences, an instruction), the messages shown whole, the nodes used. The numbers (`short_turn`,
`long_turn`, `distinct_chars`, `person_bonus`) are the block's policy's (datastore/context/policy.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from datastore.context.policy import DEFAULT_POLICY, BlockPolicy
from datastore.storage import Storage
from models.memory import MemoryNode, StoredMessage
from services import excerpts
from services.chunking import CONTINUATION, render, strip_stamps
from services.excerpts import Excerpt, Unit
from services.filler import is_filler
from services.speakers import is_human
from services.tokens import count_tokens


@dataclass
class Shown:
    """What the block holds so far: unit fingerprints (`memory`: those the memory sections show, not the
    instructions' or the recent turns'), messages shown whole, node ids used."""

    fingerprints: set[str] = field(default_factory=set)
    memory: set[str] = field(default_factory=set)
    messages: set[str] = field(default_factory=set)
    nodes: set[str] = field(default_factory=set)

    def covers(self, node: MemoryNode) -> bool:
        """Whether everything the node holds is already shown (it was used, or all its messages were)."""
        return node.id in self.nodes or bool(node.message_ids) and set(node.message_ids) <= self.messages


@dataclass(frozen=True)
class Piece:
    """A node's text as the block shows it (Texts.of), cut into units (services/excerpts.segment).

    short: the turns that are whole messages of at most `short_turn` tokens: each is kept or left out whole. A
    summary has none (its lines are lead sentences of many messages); a chunk's first or last turn has none
    when the window starts or ends inside a long message (its piece there is short, the message is not)."""

    node: MemoryNode
    text: str
    units: list[Unit]
    short: frozenset[int]


class Texts:
    """The whole-start, stamp-free text of nodes, read once per request. storage: where a chunk's first
    message is read from (one indexed read per chunk). policy: `short_turn`, `long_turn`."""

    def __init__(self, storage: Storage, ns: str, policy: BlockPolicy = DEFAULT_POLICY) -> None:
        self.storage = storage
        self.policy = policy
        self.ns = ns
        self._done: dict[str, str] = {}
        self._inside: dict[str, tuple[bool, bool]] = {}  # node id -> (starts, ends) inside a long message
        self._pieces: dict[str, Piece] = {}
        self._said: dict[str, list[tuple[str, datetime | None]]] = {}  # node id -> its messages, folded, timed
        self._at: dict[tuple[str, int], StoredMessage | None] = {}  # (source, token) -> the message holding it

    def prefetch(self, nodes: Iterable[MemoryNode]) -> None:
        """Read the first and last messages of these chunks at once (`Storage.messages_at`: one read), so that
        making each whole (`of`) reads nothing more."""
        places = [
            (n.source_id, tok)
            for n in nodes
            if n.level == 1 and n.source_type == "conversation" and n.id not in self._done
            for tok in (n.tok_start, n.tok_end - 1)
            if (n.source_id, tok) not in self._at
        ]
        if places:
            found = self.storage.messages_at(self.ns, places)
            self._at.update((p, found.get(p)) for p in places)

    def _message_at(self, source_id: str, tok: int) -> list[StoredMessage]:
        """[the message holding token `tok` of the source] ([] when none), read once."""
        if (source_id, tok) not in self._at:
            found = self.storage.messages(self.ns, source_id, tok, tok + 1, limit=1)
            self._at[(source_id, tok)] = found[0] if found else None
        m = self._at[(source_id, tok)]
        return [m] if m is not None else []

    def of(self, node: MemoryNode) -> str:
        """A chunk's text (a summary's as it is), stamps removed, with a short turn shown whole: a chunk is whole
        sentences (services/chunking.py), and where it opens or closes inside a message of `long_turn` tokens or
        less, that message's lines are replaced by the whole message, as a turn is shown; a longer one stays
        as the chunk cut it (its sentences, its speaker named)."""
        text = self._done.get(node.id)
        if text is None:
            text = node.text
            starts_inside = ends_inside = False
            if node.level == 1 and node.source_type == "conversation":
                first = self._message_at(node.source_id, node.tok_start)
                made_whole = None
                if first and first[0].tok_offset != node.tok_start:
                    text, starts_inside = self._whole(first[0], text, at_start=True)
                    made_whole = None if starts_inside else first[0].id
                if not node.text.endswith("\n"):
                    last = self._message_at(node.source_id, node.tok_end - 1)
                    if last and last[0].id != made_whole:
                        text, ends_inside = self._whole(last[0], text, at_start=False)
            text = self._done[node.id] = strip_stamps(text).strip("\n")
            self._inside[node.id] = (starts_inside, ends_inside)
        return text

    def _whole(self, message: StoredMessage, text: str, at_start: bool) -> tuple[str, bool]:
        """`text` with its first (`at_start`) or last message's lines replaced by the whole message when it is a
        short turn; and whether the text still opens (closes) inside that message."""
        if count_tokens(message.content) > self.policy.long_turn:
            return text, True
        lines = text.rstrip("\n").split("\n")
        heads = [k for k, ln in enumerate(lines) if ln and not ln.startswith(CONTINUATION)]
        whole = render(message).rstrip("\n")
        if at_start:
            rest = lines[heads[1] :] if len(heads) > 1 else []
            return "\n".join([whole, *rest]) + ("\n" if text.endswith("\n") else ""), False
        kept = lines[: heads[-1]] if heads else []
        return "\n".join([*kept, whole]), False

    def dated(self, node: MemoryNode, text: str) -> list[tuple[datetime | None, str]] | None:
        """`text` (an excerpt of the node) cut where the day changes: (time, lines) per run of lines said on one
        day, the time of each line's message (read from the store, once per node); None when the node lies within
        one day or is no conversation's, or when no line is found in its messages (it is shown whole then, under
        its span). A header line (`Ann: …`) goes with the lines after it."""
        start, end = node.start_time, node.end_time
        if node.source_type != "conversation" or start is None or end is None or start.date() == end.date():
            return None
        said = self._said.get(node.id)
        if said is None:
            lo, hi = node.tok_start, node.tok_end
            below = [node]
            while below and below[0].level > 1:  # a summary: the token range of the chunks under it
                below = self.storage.get_nodes(self.ns, [c for b in below for c in b.children])
                if below and below[0].level == 1:
                    lo, hi = min(b.tok_start for b in below), max(b.tok_end for b in below)
            messages = self.storage.messages(self.ns, node.source_id, lo, hi) if hi > lo else []
            said = self._said[node.id] = [(_fold(m.content), m.created_at) for m in messages]
        units = excerpts.segment(text, speakers=node.speakers)
        lines = text.split("\n")
        turn_of: list[int | None] = [None] * len(lines)
        by_turn: dict[int, list[str]] = {}
        for u in units:
            by_turn.setdefault(u.turn, []).append(_fold(u.text))
            for ln in range(u.line, min(u.end_line, len(lines) - 1) + 1):
                turn_of[ln] = u.turn
        when: dict[int, datetime | None] = {}
        at = 0
        for turn, texts in sorted(by_turn.items()):
            probe = max(texts, key=len)  # its longest sentence: a short one ("Yes.") is said in many messages
            for k in range(at, len(said)):
                if probe and probe in said[k][0]:
                    when[turn], at = said[k][1], k
                    break
        if not when:
            return None
        for k in range(len(lines) - 2, -1, -1):  # a line without a unit (a header) goes with the next one
            turn_of[k] = turn_of[k] if turn_of[k] is not None else turn_of[k + 1]
        times: list[datetime | None] = []
        last: datetime | None = next(iter(when.values()))
        for of in turn_of:
            t = when.get(of) if of is not None else None
            last = t or last
            times.append(last)
        parts: list[tuple[datetime | None, str]] = []
        for line, t in zip(lines, times, strict=True):
            if parts and (t is None or (parts[-1][0] is not None and parts[-1][0].date() == t.date())):
                parts[-1] = (parts[-1][0], parts[-1][1] + "\n" + line)
            else:
                parts.append((t, line))
        return parts

    def piece(self, node: MemoryNode) -> Piece:
        """The node's text (`of`), its units and its short turns (see Piece)."""
        done = self._pieces.get(node.id)
        if done is not None:
            return done
        text = self.of(node)
        units = excerpts.segment(text, speakers=node.speakers if node.source_type == "conversation" else ())
        short: set[int] = set()
        if node.level == 1 and units:
            starts_inside, ends_inside = self._inside[node.id]
            turns: dict[int, list[str]] = {}
            for u in units:
                turns.setdefault(u.turn, []).append(u.text)
            inside = ({units[0].turn} if starts_inside else set()) | ({units[-1].turn} if ends_inside else set())
            short = {
                t
                for t, texts in turns.items()
                if t not in inside and count_tokens(" ".join(texts)) <= self.policy.short_turn
            }
        done = self._pieces[node.id] = Piece(node, text, units, frozenset(short))
        return done


def _fold(text: str) -> str:
    return " ".join(text.split())


def closeness(
    piece: Piece, query_terms: set[str], weights: Mapping[str, float], person_bonus: float = DEFAULT_POLICY.person_bonus
) -> list[float]:
    """Per unit: the summed weights of the query's terms it holds (its speaker's name counted), plus
    `person_bonus` of the best weight when a person said it and it holds a query term; a short turn's units share
    their turn's best score, so the turn is kept or left whole."""
    top = max((weights.get(t, 0.0) for t in query_terms), default=0.0) or 1.0
    out = []
    for u in piece.units:
        held = query_terms & set(excerpts.terms(f"{u.speaker or ''} {u.text}"))
        score = sum(weights.get(t, 0.0) for t in held)
        if score and is_human(u.speaker):
            score += person_bonus * top
        out.append(score)
    for members in _turns(piece).values():
        if len(members) > 1 and piece.units[members[0]].turn in piece.short:
            best = max(out[i] for i in members)
            for i in members:
                out[i] = best
    return out


def cut(
    piece: Piece,
    query: str,
    budget: int,
    query_terms: set[str],
    weights: Mapping[str, float],
    shown: Shown,
    people_first: bool = False,
    policy: BlockPolicy = DEFAULT_POLICY,
) -> Excerpt | None:
    """The excerpt of a piece within `budget` tokens: its units closest to the query (people's lines first
    when `people_first`: a summary's lines of what the user brought up), those already shown left out; None
    when nothing new fits."""
    if budget <= 0 or not piece.units:
        return None
    scores = closeness(piece, query_terms, weights, policy.person_bonus)
    if people_first:
        top = max(scores, default=0.0) or 1.0
        scores = [sc + (top if is_human(u.speaker) else 0.0) for u, sc in zip(piece.units, scores, strict=True)]
    node = piece.node
    speakers = node.speakers if node.source_type == "conversation" else ()
    short = [m for m in _turns(piece).values() if piece.units[m[0]].turn in piece.short]  # whole or not at all
    seen = seen_in(piece, shown, policy.distinct_chars)
    ex = excerpts.excerpt(piece.text, query, budget, scores=scores, seen=seen, speakers=speakers, groups=short)
    if not ex.kept:
        return None
    text = excerpts.inline_elisions(ex.text)
    if not any(ch.isalnum() for ch in text):
        return None
    return ex if text == ex.text else replace(ex, text=text, tokens=count_tokens(text))


def seen_in(piece: Piece, shown: Shown, distinct_chars: int = DEFAULT_POLICY.distinct_chars) -> set[str]:
    """The fingerprints of the piece's units to leave out: a unit already shown, except inside a short turn (a
    turn is kept or left out whole: "Thanks, Mel!" said twice is not the same turn), which is left out whole
    when each of its units that is not filler (services/filler.py) is shown by a memory section (its message's
    line, which holds what a short message says, is in the block: "Hi! I just got back from Norway." is not shown
    again after "I just got back from Norway."; an instruction's turn is still shown whole, and its line in the
    instructions section then goes); in a longer
    turn, a unit of `distinct_chars` or more ("Thanks!" is said in many turns); in a summary, every unit shown
    (its lines are the lead sentences of messages: one shown already is the same message's)."""
    out: set[str] = set()
    if piece.node.level > 1:  # a summary's line stands for a message's: shown once, however short
        return {p for p in map(excerpts.fingerprint, piece.units) if p in shown.fingerprints}
    for members in _turns(piece).values():
        units = [piece.units[i] for i in members]
        prints = [excerpts.fingerprint(u) for u in units]
        seen = [p in shown.fingerprints for p in prints]
        if not any(seen):
            continue
        short = units[0].turn in piece.short
        if short:  # left out whole when all of it is shown, or all it says is (its line holds it); else kept whole
            names = piece.node.speakers
            if all(seen) or all(
                p in shown.memory or is_filler(u.text, names) for p, u in zip(prints, units, strict=True)
            ):
                out.update(prints)
            continue
        out.update(p for p, was, u in zip(prints, seen, units, strict=True) if was and len(u.text) >= distinct_chars)
    return out


def _turns(piece: Piece) -> dict[int, list[int]]:
    """The piece's unit indices by turn."""
    turns: dict[int, list[int]] = {}
    for k, u in enumerate(piece.units):
        turns.setdefault(u.turn, []).append(k)
    return turns


def weights_of(texts: Iterable[str]) -> dict[str, float]:
    """IDF weights of terms over the candidates' texts (services/excerpts.term_weights)."""
    return excerpts.term_weights(texts)
