"""The leading fragment of a chunk: completed from its first message, or dropped.

**Leading fragment** (`complete_start`). A chunk is a window of tokens, so its first line may start mid-line,
even mid-word or mid-character. Given the first message's rendered text, the fragment is completed: the head of
its sentence (or line) is put back, with the line's speaker. Without it, the partial first sentence is dropped.
Either way a text that continues a message carries its speaker: `Ann: … rest` or a header line `Ann: …`.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal

from services.chunking import CONTINUATION
from services.excerpts.units import _ITEM, BROKEN, ELISION, Unit, _segment, _speaker, segment


def _locate(text: str, message: str) -> int | None:
    """Offset in `message` where `text` starts (text continues past the message's end, or ends inside it)."""
    probe = text[:64]
    k = message.find(probe)
    while k >= 0:
        n = min(len(message) - k, len(text))
        if message[k : k + n] == text[:n]:
            return k
        k = message.find(probe, k + 1)
    for n in range(min(len(message), len(probe)) - 1, 0, -1):  # the text starts in the message's last n chars
        if message.endswith(text[:n]):
            return len(message) - n
    return None


def _restart(text: str, units: list[Unit], i: int, header: str) -> str:
    """`text` from unit i on: its line's lead put back, a mark where the head of the line is left out, and the
    speaker (`header`, "Ann: ") when unit i continues a message whose speaker line is not in the text."""
    u = units[i]
    mark = "" if u.line_start or u.lead.endswith(ELISION + " ") else f"{ELISION} "
    if u.on_speaker_line:
        return u.lead + mark + text[u.start :]
    if u.line == 0 and header:  # the rest of the partial first line, a speaker line or not: "Ann: … rest"
        return f"{header}{ELISION} " + text[u.start :]
    head = f"{header}{ELISION}\n" if header else ""
    return head + u.lead + mark + text[u.start :]


def complete_start(
    chunk_text: str,
    message: str | None = None,
    *,
    first_speaker: str | None = None,
    speakers: Collection[str] | None = None,
    partial: bool | None = None,
    mode: Literal["sentence", "line"] = "sentence",
) -> str:
    """A chunk's text with no partial first line: completed from its first message, else its fragment dropped.

    chunk_text: an L1 chunk's text (a token window of rendered messages). message: the rendered text
    (services/chunking.render) of the chunk's first message (`message_ids[0]`), or None. mode: complete the
    first sentence of the partial line (`Ann: … head of the sentence|rest`) or the whole line (`[stamp] Ann:
    ...|rest`); code, list and table lines are always completed whole. Without the message (or when the text is
    not found in it) the partial first sentence is dropped (the whole first line when it holds no second unit).
    partial: whether the chunk starts inside a line, when the caller knows it (a chunk whose `tok_start` is its
    first message's `tok_offset` does not); None: read it from the message, else guess it from the first line
    (a speaker line or an indented continuation is whole; a document's line is whole when it starts with a
    capital, a digit or a list mark). A first line that continues a message is given its speaker (`Ann: …`
    header) when the message or `first_speaker` says it. Characters broken by the token cut (U+FFFD) at either
    end are removed. Returns "" when nothing whole is left. Never raises.
    """
    text = chunk_text.lstrip(BROKEN).rstrip(BROKEN)
    broken = len(text) != len(chunk_text.rstrip(BROKEN))
    if text.startswith("\n"):  # the window starts at a line break: the next line is whole
        text, broken = text.lstrip("\n"), False
    conversation = speakers is None or len(speakers) > 0
    if message is not None and (k := _locate(text, message)) is not None:
        line_end = message.find("\n", k)
        mu = segment(message if line_end < 0 else message[:line_end], speakers=speakers)  # what precedes k matters
        head_prefix = mu[0].prefix if mu else ""
        ls = message.rfind("\n", 0, k) + 1
        if (partial is False or k == ls) and not broken:
            on_first_line = ls == 0
            return text if on_first_line or not head_prefix else f"{head_prefix}{ELISION}\n{text}"
        # the unit holding position k (or the next one when k falls between units)
        u = next((x for x in mu if x.end > k), None)
        if u is None:
            return ""
        skip = max(0, u.start - k)
        rest = text[skip:]
        whole = mode == "line" or u.kind != "sentence" or u.line_start
        if whole:  # from the start of k's line (mode "line") or of its unit's first line
            start = message.rfind("\n", 0, k if skip == 0 and mode == "line" else u.start) + 1
            head = message[start : k if skip == 0 else u.start]
            hdr = "" if start == 0 or not head_prefix else f"{head_prefix}{ELISION}\n"
            return hdr + head + rest
        lead = u.lead if u.lead.endswith(ELISION + " ") else f"{u.lead}{ELISION} "
        hdr = "" if u.on_speaker_line or not head_prefix else f"{head_prefix}{ELISION}\n"
        return hdr + lead + message[u.start : max(k, u.start)] + rest
    first_line = text.split("\n", 1)[0]
    if partial is None:
        if conversation:
            partial = not (
                _speaker(first_line, speakers) or first_line.startswith(CONTINUATION) or not first_line.strip()
            )
        else:
            partial = not (
                first_line[:1].isupper()
                or first_line[:1].isdigit()
                or _ITEM.match(first_line)
                or not first_line.strip()
            )
    header = f"{first_speaker}: " if first_speaker and conversation else ""
    units = _segment(text, first_speaker, speakers, partial_first=bool(partial or broken))
    if not (partial or broken):
        if units and header and not units[0].on_speaker_line and units[0].turn == 0:
            return f"{header}{ELISION}\n{text}"  # whole lines that continue a message: say whose
        return text
    # drop the unit the text starts inside (a sentence: up to its end; any other unit: its whole line)
    if not units:
        return ""
    u0 = units[0]
    if u0.kind == "sentence":
        nxt = units[1] if len(units) > 1 else None
    else:
        nxt = next((x for x in units if x.line > u0.end_line), None)
    if nxt is None:
        return ""
    return _restart(text, units, nxt.index, header if nxt.turn == 0 else "")
