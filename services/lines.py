"""Lines: what a message says, in one or two of its own sentences (its informative lead, and for a long message
the sentence that states its point). Pure logic over strings; datastore/write/build.py makes the line nodes.

**Sentences** (`sentences`). The message's content is cut by the project's sentence splitter
(services/excerpts.segment, in document mode: no speaker lines); only prose sentences and list items count
(code, fences, headings and table rows are no one's lead). This is the one place that names the splitter, so
swapping it (services/text.py, once it exists) changes every line at once.

**Filler** (`is_filler`). A sentence says nothing when, after dropping stop words (services/text.STOP_WORDS),
the words of FILLER_WORDS (greetings, thanks, acknowledgements, bare exclamations and praise: "Thanks,
Caroline!", "Sure!", "Great question.", "Sounds great!", "How about you?") and the names of the conversation's
speakers (and short forms of them: "Mel" for "Melanie"), no word is left, or a single one that is not specific
(shorter than SPECIFIC_CHARS, without a digit, not a capitalised name): "Thanks for the tip!" says nothing, "I'm
vegetarian." informs. A short sentence (PRAISE_WORDS words at most) that opens with praise (PRAISE: "That sounds
like a solid plan.", "It sounds like you have a solid plan in place.") says nothing either, unless it names someone
or holds a number ("That sounds like a productive meeting with Patrick!").

**Lead** (`lead_lines`). The first sentence that is not filler, cut to MAX_LINE_TOKENS (at a word, with "…").
A message of only filler has no line. In a short message (LONG_MESSAGE_TOKENS tokens at most, a turn of a chat)
a lead shorter than SHORT_LEAD_TOKENS takes the later sentences that are not filler until the line is that long
("Preikestolen at sunrise. Next month I am going skiing in Chamonix.": the plan is not lost).
A long message (more than LONG_MESSAGE_TOKENS tokens, typically an assistant's answer) adds its point: among
its later sentences, the one that shares the most content words with the rest of the message (its centre; per
square root of its own content words, so a long list item does not win by length), counted double when it
opens with a conclusion marker ("In short", "Overall", "I recommend", "The key ..."; POINT_MARKERS); none
when no later sentence shares a word.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Collection

from services.excerpts import segment
from services.text import STOP_WORDS, WORD, fold, words
from services.tokens import count_tokens, decode, encode

MAX_LINE_TOKENS = 60
"""A lead or point sentence longer than this (cl100k tokens) is cut at a word and ends with "…"."""
LONG_MESSAGE_TOKENS = 80
"""A message longer than this (cl100k tokens) adds the sentence that states its point to its lead."""
SHORT_LEAD_TOKENS = 12
"""A short message's lead shorter than this (cl100k tokens: "Preikestolen at sunrise." is 7) takes the message's
next sentences that are not filler until the line is this long; a longer lead says enough (a dated list has
room for more lines). BEAM @1000, dev 11-20 / held-out 1-10 (bench/RESULTS.md "BEAM: the held-out chats"):
every short message's line holding all of it cost dev event_ordering 0.453 -> 0.393; 16 cost preference_following
0.717 -> 0.667; 12 gives overall 0.688 -> 0.691 / 0.637 -> 0.640."""
SEPARATOR = " … "
"""Between the lead and the point of a long message in a line's text."""

FILLER_WORDS = frozenset(
    """hi hello hey hiya heya yo morning evening afternoon night good bye goodbye goodnight cya see later soon
    thanks thank thx ty cheers appreciate appreciated welcome np problem worries sure ok okay k alright right yes
    yeah yep yup ya no nope nah oh ah aw aww awww hmm hm um uh wow whoa woah omg lol haha hahaha hehe great cool
    nice awesome amazing wonderful fantastic fabulous incredible excellent perfect lovely sweet neat brilliant
    beautiful super glad happy excited exciting fun sounds sound absolutely definitely totally exactly indeed
    true agreed agree course certainly question questions care take let know mean guess well really much lot
    love congrats congratulations proud keep up work job way go feel feels thing things stuff pretty quite
    always happy also glad am m re ve ll d i'm it's that's what's you're we're there's here's let's
    dear buddy friend friends pal mate guys doing something anything everything nothing yourself hope hoping kind
    words news tip tips gorgeous stunning cute adorable impressive inspiring inspired lucky blessed sorry hear
    heard looks look looking seems seem wish luck enjoy enjoyed enjoying blast stoked thrilled joy wonderful
    appreciated makes made glad totally honestly gonna wanna kinda sorta like ya yay woohoo hooray whoo day please pls
    helped help helps meant means long time talk chat talking chatting catch breakdown breaking explanation
    explaining advice info information insight insights suggestion suggestions detailed solid""".split()
)
SPECIFIC_CHARS = 6
"""A sentence with a single content word informs only when that word is specific: this long or longer, holding
a digit, or capitalised inside the sentence (a name)."""

POINT_MARKERS = re.compile(
    r"^(in short|in summary|to summari[sz]e|to sum up|overall|in conclusion|the (key|main|bottom line|short answer|"
    r"best)\b|bottom line|so,|therefore|thus|i (would |'d )?recommend|i (would |'d )?suggest|my recommendation|"
    r"the answer is|the point is|you should|the most important)",
    re.IGNORECASE,
)

PRAISE = re.compile(
    r"^(that|this|it|what)('s| is| sounds| looks| seems)( like)?( such)?( you('ve| have)( got)?)? (a |an )?"
    r"(really |very |truly )?"
    r"(great|good|solid|thoughtful|excellent|wonderful|fantastic|smart|sensible|reasonable|well[- ]\w+|"
    r"interesting|important|valid|fair|brilliant|lovely|nice|perfect|helpful|thorough|wise|fascinating|"
    r"productive|significant|exactly what)\b",
    re.IGNORECASE,
)
"""An opener of praise ("That sounds like a solid plan.", "It sounds like you have a solid plan in place.",
"That's exactly what I needed."): with at most PRAISE_WORDS words, the sentence is filler."""
PRAISE_WORDS = 10

_MARKUP = re.compile(r"\*\*|__|`|^#{1,6}\s+|^(?:[-*+•]|\d{1,3}[.)])\s+")
_PROSE = ("sentence", "item")


def sentences(text: str) -> list[str]:
    """The prose sentences and list items of a message's content, in order, whitespace folded and markdown marks
    dropped (`**`, `__`, backticks, a heading's `#`, a list item's bullet or number) (the project's splitter, see
    the module docstring); [] for a text without one."""
    out = []
    for u in segment(text, speakers=()):
        if u.kind in _PROSE:
            s = " ".join(_MARKUP.sub("", " ".join(u.text.split())).split())
            if s:
                out.append(s)
    return out


def _name_words(names: Collection[str]) -> set[str]:
    return {w for n in names for w in words(n)}


def _is_name(word: str, names: set[str]) -> bool:
    """A speaker's name, or a short form of it ("Mel", "Mell" for "Melanie")."""
    if word in names:
        return True
    if len(word) < 3:
        return False
    short = word[:-1] if len(word) > 3 and word[-1] == word[-2] else word
    return any(n.startswith(short) for n in names)


def content_words(sentence: str, names: Collection[str] = ()) -> list[str]:
    """The words of `sentence` (services/text.words: folded, "that's" is "that" and "s") that are neither stop
    words, FILLER_WORDS nor a speaker's name (a word of `names`, or a short form of one)."""
    skip = _name_words(names)
    return [w for w in words(sentence) if w not in STOP_WORDS and w not in FILLER_WORDS and not _is_name(w, skip)]


def is_filler(sentence: str, names: Collection[str] = ()) -> bool:
    """Whether `sentence` says nothing (module docstring): no content word once stop words, FILLER_WORDS and
    the speakers' names (`names`, and short forms of them) are dropped, or a single one that is not specific
    (shorter than SPECIFIC_CHARS, no digit, not a capitalised word inside the sentence); a short opener of praise
    (PRAISE) says nothing unless it names someone or holds a number ("That sounds like a productive meeting with
    Patrick!")."""
    content = content_words(sentence, names)
    if PRAISE.match(sentence) and len(WORD.findall(sentence)) <= PRAISE_WORDS:
        return not any(_specific(w, sentence) for w in content)
    if len(content) != 1:
        return not content
    word = content[0]
    return not (len(word) >= SPECIFIC_CHARS or _specific(word, sentence))


def _specific(word: str, sentence: str) -> bool:
    """Whether content `word` (folded) of `sentence` holds a digit or is capitalised inside it (a name)."""
    if any(c.isdigit() for c in word):
        return True
    return any(fold(w) == word and w[:1].isupper() for w in WORD.findall(sentence)[1:])


def _cut(sentence: str, max_tokens: int) -> str:
    """`sentence`, or its head of at most `max_tokens` tokens cut at a word, ending with "…"."""
    ids = encode(sentence)
    if len(ids) <= max_tokens:
        return sentence
    head = decode(ids[: max_tokens - 1])
    space = head.rfind(" ")
    if space > len(head) // 2:
        head = head[:space]
    return head.rstrip(" ,;:-\ufffd") + "…"


def lead_lines(content: str, names: Collection[str] = ()) -> list[str]:
    """[lead] or [lead, point] of a message (module docstring; a short message's short lead takes its next
    informative sentences), each at most MAX_LINE_TOKENS; [] when every
    sentence is filler (or the message has no prose). `names`: the conversation's speakers (never content)."""
    said = sentences(content)
    first = next((i for i, s in enumerate(said) if not is_filler(s, names)), None)
    if first is None:
        return []
    out = [_cut(said[first], MAX_LINE_TOKENS)]
    later = said[first + 1 :]
    if count_tokens(content) <= LONG_MESSAGE_TOKENS:  # a short message: a short lead says what follows too
        for s in later:
            if count_tokens(out[0]) >= SHORT_LEAD_TOKENS:
                break
            if not is_filler(s, names):
                if count_tokens(f"{out[0]} {s}") > MAX_LINE_TOKENS:
                    break
                out[0] = f"{out[0]} {s}"
        return out
    if len(later) < 2:
        return out
    sets = [set(content_words(s, names)) for s in said]
    counts: Counter[str] = Counter(w for ws in sets for w in ws)
    best, best_score = None, 0.0
    for i, s in enumerate(later, start=first + 1):
        shared = sum(1 for w in sets[i] if counts[w] > 1)
        score = shared / math.sqrt(len(sets[i]) or 1) * (2.0 if POINT_MARKERS.match(s) else 1.0)
        if score > best_score:
            best, best_score = s, score
    if best is not None:
        out.append(_cut(best, MAX_LINE_TOKENS))
    return out


def line_text(content: str, names: Collection[str] = ()) -> str | None:
    """The text of a message's line: its lead, and for a long message its point after SEPARATOR; None when the
    message has no informative sentence."""
    parts = lead_lines(content, names)
    return SEPARATOR.join(parts) if parts else None


def spoken(speaker: str | None, text: str) -> str:
    """`speaker: text`: how a line is shown, embedded and matched (a question naming a person finds what that
    person said)."""
    return f"{speaker}: {text}" if speaker else text
