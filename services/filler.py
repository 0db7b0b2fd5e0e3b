"""Filler: the one rule of what says nothing, for the lines (services/lines.py) and the extractive summaries
(services/summarising.py). Pure logic over strings.

A sentence says nothing (`is_filler`) when, after dropping stop words (services/text.STOP_WORDS), the words of
FILLER_WORDS (greetings, thanks, acknowledgements, bare exclamations and praise: "Thanks, Caroline!", "Sure!",
"Great question.", "Sounds great!", "Your support means a lot.") and the names of the conversation's speakers (and
short forms of them: "Mel" for "Melanie"), no word is left, or a single one that is not specific (shorter than
SPECIFIC_CHARS, without a digit, not a capitalised name inside the sentence): "Thanks for the tip!" says nothing,
"I'm vegetarian." informs. A capitalised name alone after a comma in a sentence of at most ADDRESS_WORDS words
(or in one of two words) is whom it addresses ("Wow, Jon!", "Thanks Jo!"; "I love Paris!" informs). A question
back (QUESTION_BACK: "How about you?", "How was your weekend?") says nothing; so does a short sentence
(PRAISE_WORDS words at most) that opens with praise (PRAISE: "That sounds like a solid plan.", "It sounds like
you have a solid plan in place.") unless it names someone or holds a number ("That sounds like a productive
meeting with Patrick!").
"""

from __future__ import annotations

import re
from collections.abc import Collection

from services.text import STOP_WORDS, WORD, fold, words

FILLER_WORDS = frozenset(
    """hi hello hey hiya heya yo morning evening afternoon night good bye goodbye goodnight cya see later soon
    thanks thank thx ty cheers appreciate appreciated welcome np problem worries sure ok okay k alright right yes
    yeah yep yup ya no nope nah oh ah aw aww awww hmm hm um uh wow whoa woah omg lol haha hahaha hehe great cool
    nice awesome amazing wonderful fantastic fabulous incredible excellent perfect lovely sweet neat brilliant
    beautiful super glad happy excited exciting fun sounds sound absolutely definitely totally exactly indeed
    true agreed agree course certainly question questions care take let know mean guess well really much lot
    love congrats congratulations proud keep up way go feel feels thing things stuff pretty quite
    always happy also glad am m re ve ll d i'm it's that's what's you're we're there's here's let's
    dear buddy friend friends pal mate guys doing something anything everything nothing yourself hope hoping kind
    words news tip tips gorgeous stunning cute adorable impressive inspiring inspired lucky blessed sorry hear
    heard looks look looking seems seem wish luck enjoy enjoyed enjoying blast stoked thrilled joy wonderful
    appreciated makes made glad totally honestly gonna wanna kinda sorta like ya yay woohoo hooray whoo day please pls
    helped help helps meant means long time talk chat talking chatting catch breakdown breaking explanation
    explaining advice info information insight insights suggestion suggestions detailed solid howdy tysm kk gotcha
    ooh lmao hugs hug xoxo cheering rooting support supportive sharing share feeling""".split()
)
SPECIFIC_CHARS = 6
"""A sentence with a single content word informs only when that word is specific: this long or longer, holding
a digit, or capitalised inside the sentence (a name)."""

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
ADDRESS_WORDS = 4
"""A sentence of at most this many words whose one content word is a capitalised name after a comma addresses
that person ("Wow, Jon!"): filler."""

QUESTION_BACK = re.compile(
    r"^(?:(?:and|so|but)\s+)?(?:(?:how|what)\s+about\s+you|you\?|and\s+you|what's\s+up|how's\s+(?:it\s+going|"
    r"everything|life|things|your\s+\w+(?:\s+going)?)|how\s+(?:are|have)\s+you(?:\s+(?:been|doing|feeling))?|"
    r"how\s+(?:was|is)\s+your\s+\w+|what's\s+new|anything\s+new|what\s+(?:have\s+you|are\s+you)\s+(?:been\s+)?"
    r"(?:up\s+to|doing)|you\s+(?:too|as\s+well))\b(?:[\s,]+\w+)?[\s?!.]*$",
    re.I,
)
"""A question back that asks nothing of substance ("How about you?", "And you?", "How's it going?", "How was
your weekend?"): filler, whatever its words."""


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
    """Whether `sentence` says nothing (module docstring): a question back (QUESTION_BACK); no content word once
    stop words, FILLER_WORDS and the speakers' names (`names`, and short forms of them) are dropped, or a single
    one that is not specific (shorter than SPECIFIC_CHARS, no digit, not a capitalised word inside the sentence)
    or is a name addressed in a sentence of at most ADDRESS_WORDS words; a short opener of praise (PRAISE) says
    nothing unless it names someone or holds a number ("That sounds like a productive meeting with Patrick!")."""
    text = sentence.strip().replace("\u2019", "'")
    if QUESTION_BACK.match(text):
        return True
    content = content_words(text, names)
    said = WORD.findall(text)
    if PRAISE.match(text) and len(said) <= PRAISE_WORDS:
        return not any(_specific(w, text) for w in content)
    if len(content) != 1:
        return not content
    word = content[0]
    if _addressed(word, text, said):
        return True
    return not (len(word) >= SPECIFIC_CHARS or _specific(word, text))


def _addressed(word: str, sentence: str, said: list[str]) -> bool:
    """Whether content `word` is a name the short `sentence` addresses: at most ADDRESS_WORDS words, the word
    capitalised inside it, after a comma or in a sentence of two words ("Wow, Jon!", "Thanks Jo!"; not "I love
    Paris!")."""
    if len(said) > ADDRESS_WORDS or not _specific(word, sentence) or any(c.isdigit() for c in word):
        return False
    return len(said) <= 2 or re.search(rf",\s*{re.escape(word)}\b", sentence, re.I) is not None


def _specific(word: str, sentence: str) -> bool:
    """Whether content `word` (folded) of `sentence` holds a digit or is capitalised inside it (a name)."""
    if any(c.isdigit() for c in word):
        return True
    return any(fold(w) == word and w[:1].isupper() for w in WORD.findall(sentence)[1:])
