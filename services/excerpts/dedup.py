"""Fingerprints of shown units, so a block shows each sentence once.

**Dedup.** `fingerprint(unit)` is the speaker and the unit's text with whitespace folded (case kept); a unit
whose fingerprint is in the caller's `seen` set (the units already shown in the block, e.g. the 20-token overlap
of the previous chunk, or a recent turn's sentences) is left out like any other (`excerpt(..., seen=...)` or
`remove_seen`).

"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from services.excerpts.units import Unit, segment


def normalise_line(text: str) -> str:
    """`text` with every run of whitespace (line breaks and indentation included) folded to one space, trimmed;
    case and punctuation kept."""
    return " ".join(text.split())


def fingerprint(unit: Unit) -> str:
    """A unit's identity across texts: `speaker \\x1f normalised text` (speaker "" when unknown). Equal for the
    same sentence of the same speaker whether it comes from a chunk, its overlapping neighbour or a recent
    turn rendered on one line."""
    return f"{unit.speaker or ''}\x1f{normalise_line(unit.text)}"


def fingerprints(
    text: str | Iterable[Unit], *, first_speaker: str | None = None, speakers: Collection[str] | None = None
) -> set[str]:
    """The fingerprints of a text's units (segmented as `segment` does) or of the given units."""
    units = segment(text, first_speaker=first_speaker, speakers=speakers) if isinstance(text, str) else text
    return {fingerprint(u) for u in units}


def remove_seen(units: Iterable[Unit], seen: Collection[str]) -> list[Unit]:
    """The units whose fingerprint is not in `seen`, in order. To show each sentence once in a block, keep one
    `seen` set per block, pass it to each `excerpt` (or filter with this), and add `Excerpt.fingerprints()`
    of what was shown. Exact matches only: a sentence cut short at a chunk's end differs from the whole one."""
    return [u for u in units if fingerprint(u) not in seen]
