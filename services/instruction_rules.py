"""The offline rules behind PatternDetector (services/instructions.py): masking, sentences, clauses, patterns.

Everything here is pure string work on one message. Offsets are character offsets into the message's content:
masking and apostrophe folding keep the length of the text, so a span found in the masked text is the same span
of the original. The rules favour precision: a sentence is accepted only when one clause of it opens with a
statement form listed in PatternDetector's docstring, and a long list of rejections (questions, conditions,
hypotheticals, quotes, one-off requests, other people, the past) comes first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from services.text import fold, sentence_spans, stem

Kind = Literal["instruction", "preference"]

# --- masking: what the speaker did not say in their own voice ---------------------------------------------------

_FENCE = re.compile(r"^[ \t]*(```|~~~)[^\n]*\n.*?(?:^[ \t]*\1[^\n]*$|\Z)", re.S | re.M)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_QUOTE_LINE = re.compile(r"^[ \t]*>[^\n]*$", re.M)
_DOUBLE_QUOTED = re.compile(r"\"[^\"\n]*\"|\u201c[^\u201d\n]*\u201d|\u00ab[^\u00bb\n]*\u00bb")
# a single-quoted span: the quote marks stand at word edges, so the apostrophes of "don't" and "I'd" never count
_SINGLE_QUOTED = re.compile(r"(?<![\w'])['\u2018](?=\S)[^'\u2018\u2019\n]*?(?<=\S)['\u2019](?![\w'])")


def _blank(match: re.Match[str]) -> str:
    return re.sub(r"[^\n]", " ", match.group(0))


def mask(content: str) -> str:
    """content with code blocks, inline code, `>` quote lines and quoted spans blanked (same length; line breaks
    kept), and curly apostrophes folded to `'`: what is left is what the speaker says in their own voice."""
    text = content.replace("\u2019", "'").replace("\u02bc", "'")
    text = _FENCE.sub(_blank, text)
    text = _INLINE_CODE.sub(_blank, text)
    text = _QUOTE_LINE.sub(_blank, text)
    text = _DOUBLE_QUOTED.sub(_blank, text)
    return _SINGLE_QUOTED.sub(_blank, text)


# --- sentences and clauses -----------------------------------------------------------------------------------------


def sentences(masked: str) -> list[tuple[int, int]]:
    """(start, end) offsets of the sentences of a masked message: the project's one splitter
    (services/text.sentence_spans: syntok, and every line break); pieces with fewer than two word characters
    are dropped; spans are trimmed."""
    return [(a, b) for a, b in sentence_spans(masked) if len(re.findall(r"\w", masked[a:b])) >= 2]


# Words that open a new clause after a comma (a pronoun subject, an auxiliary, a wh-word, a lead-in).
_OPENER = (
    r"(?:i|i'm|i'd|i've|i'll|you|you're|you'd|you'll|we|we're|he|she|it|it's|they|there|this|that|my|please|"
    r"let's|can|could|would|will|should|shall|do|does|did|is|are|am|was|were|have|has|had|may|might|must|"
    r"what|why|how|where|which|who|whom|whose|if|when|whenever|always|never|from now on|going forward|"
    r"moving forward|in the future|otherwise)\b"
)
_COORD = r"(?:so|and|but|because|since|as|or|though|although|while|whereas|plus|then|yet|hence|therefore|thus)"
_COMMA_SPLIT = re.compile(
    rf",\s+(?=(?:{_COORD}\s+)?{_OPENER})|\s+(?=(?:so|and|but|because|since|while)\s+(?:i|i'm|i'd)\s)", re.I
)
_HARD_SPLIT = re.compile(r"\s*;\s*|\s+[\u2014\u2013-]{1,2}\s+|:\s+|\s+\u2026\s*")
_CONDITION = re.compile(
    r"^(?:if|when|whenever|every\s+time|each\s+time|any\s*time|as\s+long\s+as|unless|in\s+case|once|even\s+if|"
    r"in\s+cases?\s+where)\b",
    re.I,
)


@dataclass(frozen=True)
class Clause:
    """One clause of a sentence: [start, end) offsets within the sentence, and whether it asks something."""

    start: int
    end: int
    question: bool


def clauses(sentence: str) -> list[Clause]:
    """The clauses of one (masked) sentence. Split at `;`, `:`, spaced dashes, at commas that are followed
    (after an optional conjunction) by a word that opens a clause (a pronoun, an auxiliary, a wh-word, please,
    if/when...), and before `and I`, `so I`, `but I` ...; a condition clause (`When I ask about X, ...`) also
    ends at its first comma. The last clause of a sentence that ends with `?` asks something."""
    cuts: set[int] = {0, len(sentence)}
    for m in _HARD_SPLIT.finditer(sentence):
        cuts.update((m.start(), m.end()))
    for m in _COMMA_SPLIT.finditer(sentence):
        cuts.update((m.start(), m.end()))
    bounds = sorted(cuts)
    # a condition clause ends at its first comma, whatever follows it
    extra: set[int] = set()
    for a, b in zip(bounds, bounds[1:], strict=False):
        piece = sentence[a:b]
        lead = _strip_prefix(piece.strip().lower())
        if _CONDITION.match(lead):
            comma = piece.find(",")
            if comma > 0:
                extra.update((a + comma, a + comma + 1))
    bounds = sorted(cuts | extra)
    out: list[Clause] = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        piece = sentence[a:b]
        text = piece.strip(" \t\n,;:")
        if not re.search(r"\w", text):
            continue
        start = a + piece.find(text)
        joined = re.match(rf"(?:{_COORD})\s+(?=\S)", text, re.I)  # "so I prefer": the statement is "I prefer"
        if joined and len(out) > 0:
            start += joined.end()
            text = text[joined.end() :]
        out.append(Clause(start, start + len(text), False))
    if out and sentence.rstrip(" \"')]\u201d").endswith(("?", "\uff1f")):
        last = out[-1]
        out[-1] = Clause(last.start, last.end, True)
    return out


# --- words ---------------------------------------------------------------------------------------------------------

# Discourse openers skipped at the start of a clause ("OK, so from now on ...", "Also, I prefer ...").
_PREFIX = re.compile(
    r"^(?:(?:ok(?:ay)?|also|and|but|so|oh|well|btw|by the way|one more thing|another thing|actually|honestly|"
    r"personally|generally|in general|just|again|as i (?:said|mentioned)|like i said|fyi|for the record|"
    r"please note(?: that)?|just so you know|for context|to be clear|hey|hi|"
    r"hello|thanks|thank you|great|cool|perfect|alright|all right|yes|yeah|yep|sure|got it|one thing|"
    r"a quick note|quick note|oh and|and also|but also|plus|however|anyway|anyways|because|since|as|"
    r"for what it's worth|to be honest|tbh|ps|p\.s\.|important|reminder|rule)\b[\s,:!.\-]*)+"
)
# the verbs of an imperative to an assistant (base forms); an unknown verb is a missed instruction, never a
# false one
_VERBS = frozenset(
    """
abbreviate abstain accept act adapt add address adhere adjust adopt align alert annotate answer apologise
apologize append apply ask assume attach attribute audit avoid be begin behave benchmark bold break build
bullet cache calculate call capitalise capitalize caption cc center centre change chart check choose cite
clarify close comment compare compress compute confirm consider contrast convert copy count create credit
cut decode default define delete describe design detail display document double-check draft draw drop edit
elaborate email embed emphasise emphasize enable disable encode end enumerate estimate explain export
express flag focus follow format frame generate give go greet group guide handle highlight hold ignore
illustrate import include indent indicate insert install interpret italicise italicize keep label lead
leave let limit link list localise localize log lock make mark match measure mention minify mirror monitor
name note number offer omit opt order organise organize outline output paraphrase pick pin plot point
prefer prefix present preserve prioritise prioritize print produce profile proofread provide put quote
rank rate read recommend refer refrain regard reference remind remove render rephrase reply report
respect respond restate return review rewrite round run say send separate set share shorten show
simplify skip sort speak specify spell split stay stick stop structure suggest summarise summarize switch
tabulate tag tailor talk teach tell test thank title translate treat try turn type underline update upgrade
use validate verify version walk warn wrap write maintain ensure stress phrase incorporate integrate discuss cover
justify demonstrate prove derive triple-check recheck assess evaluate analyse analyze consult encourage challenge
correct critique fix improve polish refine tidy sanitise sanitize comply conform favour favor help insist lean
mix pair pose qualify question recap relate rely reword scale search seek simulate substitute support tone trim
vary weigh word remind greet cite mention accompany back break deploy commit push merge install configure
execute release publish store save sign
""".split()
)
_OUTPUT_NOUNS = (
    r"(?:answers|responses|replies|explanations|examples|snippets|code\s+samples|code\s+examples|code\s+blocks|"
    r"summaries|messages|outputs|suggestions|recommendations|translations|solutions|walkthroughs|"
    r"tutorials|proofs|reviews|drafts)"
)
# "your answers", "all code snippets", "every answer", "future responses": the assistant's outputs in general
_GENERIC_OUTPUT = re.compile(
    rf"\b(?:(?:your|future|all(?:\s+of)?(?:\s+(?:your|the|my))?|any\s+of\s+your)\s+(?:[\w-]+\s+){{0,2}}?"
    rf"{_OUTPUT_NOUNS}|(?:every|each)\s+(?:[\w-]+\s+)?(?:answer|response|reply|explanation|example|snippet|"
    rf"summary|message|output|suggestion|solution|time))\b"
)
# markers of a standing rule that hold anywhere in an imperative clause (always/never only near its verb:
# "Explain why X is always Y" asks for one answer)
_DURABLE = re.compile(
    r"\b(?:from\s+now\s+on|going\s+forward|moving\s+forward|from\s+here\s+on(?:\s+out)?|henceforth|"
    r"(?:for|in)\s+(?:all\s+)?future\s+(?:answers|responses|replies|questions|chats|conversations|sessions)|"
    r"from\s+this\s+point(?:\s+on|\s+forward)?|at\s+all\s+times|by\s+default|for\s+the\s+rest\s+of\s+"
    r"(?:this|our|the)\s+(?:conversation|chat|session)|(?:until|unless)\s+i\s+(?:say|tell\s+you|ask)\s+otherwise|"
    r"in\s+all\s+(?:of\s+)?(?:your\s+|future\s+|my\s+)?(?:answers|responses|replies|cases|situations|contexts|"
    r"projects|code|examples|explanations|messages)|for\s+future\s+reference|from\s+then\s+on|"
    r"(?:when|whenever|every\s+time|each\s+time|any\s*time)\s+(?:i\s+(?:ask|request|want|need|mention|bring\s+up|"
    r"talk\s+about|say)|you\s+(?:answer|reply|respond|write|give|suggest|provide|show|explain|recommend|use|"
    r"mention|list|cite|quote|format|generate|create|produce)))\b"
)
_DURABLE_LEAD = re.compile(
    r"^(?:from\s+now\s+on|going\s+forward|moving\s+forward|from\s+here\s+on(?:\s+out)?|henceforth|"
    r"in\s+(?:the\s+)?future|for\s+(?:all\s+)?future\s+(?:answers|responses|replies|questions|reference|chats)|"
    r"from\s+this\s+point(?:\s+on|\s+forward)?|by\s+default|for\s+the\s+rest\s+of\s+(?:this|our|the)\s+"
    r"(?:conversation|chat|session)|from\s+today\s+on|as\s+a\s+(?:general\s+)?rule|"
    r"in\s+all\s+(?:of\s+)?your\s+(?:answers|responses|replies))\b[\s,:]*"
)
# marks of a one-off: the current answer, today, this time
_ONE_OFF = re.compile(
    r"\b(?:this\s+time|just\s+this\s+once|for\s+now|right\s+now|today(?!\s+on(?:wards?)?\b)|tonight|tomorrow|"
    r"this\s+(?:week|weekend|"
    r"morning|afternoon|evening)|(?:in|for)\s+this\s+(?:answer|response|reply|message|one|question|case|"
    r"example|snippet|draft|email|essay|post)|for\s+this\s+(?:one|task)|for\s+this$|here$)\b"
)
# questions and wishes about the speaker's own past or a hypothetical world
_QUESTION_START = re.compile(
    r"^(?:do(?!\s+not\b)|does|did|should|shall|can|could|would|will|is|are|am|was|were|have|has|had|may|might|must|"
    r"what|why|how|where|which|who|whom|whose|isn't|aren't|don't\s+you|doesn't|didn't|won't|wouldn't|"
    r"shouldn't|can't|couldn't|haven't|hasn't)\b"
)
_HYPOTHETICAL = re.compile(
    r"^(?:what\s+if|suppose|supposing|imagine|assuming|assume\s+(?:that\s+)?i|let's\s+say|say\s+i|"
    r"hypothetically|in\s+theory|theoretically|pretend|even\s+if|if\s+only|i\s+wish|i\s+wonder|"
    r"i\s+was\s+wondering|wondering)\b"
)
_REPORTING = re.compile(
    r"\b(?:said|says|told|tells|asked|asks|wrote|writes|mentioned|claims|claimed|suggested|insisted|"
    r"according\s+to|quote|quoting)\b"
)
_STANDING_CONDITION = re.compile(
    r"^(?:if|when|whenever|every\s+time|each\s+time|any\s*time|in\s+cases?\s+where)\s+(?:i|i'm|i\s+am|we)\s+"
    r"(?:ask|request|want|need|say|send|share|mention|paste|give|post|type|write|bring|talk|query|work|upload|"
    r"provide|show|use|look|search|inquire|enquire|discuss|forget|have|don't\s+specify|do\s+not\s+specify)"
    r"(?:s|ing)?\b"
)


def _strip_prefix(text: str) -> str:
    return _PREFIX.sub("", text, count=1)


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z][a-z'-]*", text)


_ADVERBS = frozenset("always never ever also just only still please consistently really".split())


def _gerund_verb(base: str) -> bool:
    """Whether `base` + ing is the gerund of an imperative verb: using, adding, putting, apologising."""
    return any(v in _VERBS for v in (base, base + "e", base[:-1] if base[-1:] == base[-2:-1] else ""))


def _always_at(text: str) -> bool:
    """Whether always/never modifies the imperative verb that text opens with ("always cite ...", "please never
    ..."), or the clause ends in always ("Answer in French always")."""
    words = _words(text[:80])
    lead = []
    while len(words) > 1 and words[0] not in _VERBS and (words[0].endswith("ly") or words[0] in _ADVERBS):
        lead.append(words.pop(0))
    return bool(set(lead) & {"always", "never"}) or bool(re.search(r"\b(?:always|at\s+all\s+times)$", text))


def _verb_at(text: str) -> bool:
    """Whether text opens with an imperative verb (one adverb in -ly may come first: `clearly label ...`)."""
    words = _words(text[:80])
    while len(words) > 1 and words[0] not in _VERBS and (words[0].endswith("ly") or words[0] in _ADVERBS):
        words = words[1:]
    return bool(words) and words[0] in _VERBS and not _MOTTO.match(" ".join(words))


# --- the statement patterns ------------------------------------------------------------------------------------------

_PLEASE = r"(?:please\s+|pls\s+|kindly\s+|do\s+)?"
_ALWAYS_NEVER = re.compile(rf"^{_PLEASE}(?:always|never(?:,?\s+ever)?|at\s+all\s+times)\s*,?\s+(?P<rest>.+)")
_DONT = re.compile(rf"^{_PLEASE}(?:don't|do\s+not|dont|never)\s+(?P<ever>ever\s+(?:again\s+)?)?(?P<rest>.+)")
_HEAD = re.compile(
    rf"^(?:{_PLEASE}(?:(?:make|be)\s+sure\s+(?:to|that\s+you|you)|remember\s+to|don't\s+forget\s+to|"
    r"do\s+not\s+forget\s+to|try\s+to|feel\s+free\s+to)\s+|"
    r"i\s+(?:want|need|'d\s+like|would\s+like|expect)\s+you\s+to\s+|"
    r"i'd\s+appreciate\s+(?:it\s+)?if\s+you\s+(?:could\s+|would\s+)?|"
    r"let's\s+|"
    rf"(?:can|could|would|will)\s+you\s+(?:please\s+)?|{_PLEASE})"
)
_REMEMBER_FACT = re.compile(
    rf"^{_PLEASE}(?:always\s+)?(?:remember|keep\s+in\s+mind|don't\s+forget|do\s+not\s+forget|note)\s+"
    r"(?:that\s+)?(?:i\s+(?:am|'m|have|'ve|do|don't|prefer|like|want|need|use|work|live|hate|love|can't|"
    r"cannot|only|always|never|usually|dislike)|i'm|my)\b"
)
_CALL_ME = re.compile(
    rf"^{_PLEASE}(?:call\s+me|address\s+me\s+as|refer\s+to\s+me\s+as)\s+(?P<name>\S+)|"
    r"^(?:i\s+go\s+by|i'd\s+like\s+to\s+be\s+called|i\s+prefer\s+to\s+be\s+called)\s+(?P<name2>\S+)"
)
_ADV = (
    r"(?:really|generally|usually|always|strongly|definitely|much|personally|still|also|just|mostly|typically|"
    r"normally|honestly|actually|do|kind\s+of|kinda|tend\s+to|would|'d|very\s+much|totally|absolutely|far)"
)
_PREFER = re.compile(rf"^i(?:'d|\s+would)?(?:\s+{_ADV})*\s+prefer\b(?P<rest>.*)")
_RATHER = re.compile(rf"^i(?:'d|\s+would|\s+had)(?:\s+{_ADV})*\s+rather\b(?P<rest>.*)")
_LIKE_MY = re.compile(
    r"^i(?:\s+(?:really|generally|usually|always|just|do))*\s+(?:like|love|prefer|enjoy)\s+(?:my|our)\s+"
    r"(?:[\w-]+\s+){1,3}?(?:to\s+be|to|when|with|without|in|as|served|formatted|written|kept|done|short|long|"
    r"brief|concise|detailed|simple|clean|black|strong|spicy|mild|sweet|hot|cold|warm|rare|medium|minimal|"
    r"light|dark|quiet|plain|formal|casual|structured|organi[sz]ed|tidy|neat|fast|slow|extra|well)\b"
)
_LIKE_WHEN = re.compile(
    r"^i(?:\s+(?:really|generally|usually|always|just|do|much|absolutely))*\s+(?:like|appreciate|prefer|"
    r"hate|dislike|don't\s+like|do\s+not\s+like|can't\s+stand|cannot\s+stand)\s+(?:it\s+)?(?:when|if)\s+you\b"
)
_LIKE_OUTPUTS = re.compile(
    r"^i(?:\s+(?:really|generally|usually|always|just|do|much|absolutely))*\s+(?:like|love|prefer|"
    r"hate|dislike|don't\s+like|do\s+not\s+like|can't\s+stand|cannot\s+stand|appreciate|value)\s+"
    rf"(?:[\w-]+\s+){{0,2}}?{_OUTPUT_NOUNS}\b(?!\s+(?:you\s+(?:gave|wrote|sent|just|made)|above))"
)
_WANT_ALL = re.compile(
    r"^i\s+(?:want|need|'d\s+like|would\s+like|expect)\s+(?:all|every|each)\s+(?:of\s+)?(?:my\s+|your\s+|the\s+)?"
    r"(?P<rest>.+)"
)
_WANT_OUTPUTS = re.compile(
    r"^i\s+(?:want|need|'d\s+like|would\s+like|expect)\s+(?:my|your|the)\s+(?:[\w-]+\s+)?"
    rf"{_OUTPUT_NOUNS}\s+(?:to|in|as|with|without|formatted|written|kept)\b"
)
_DONT_WANT = re.compile(r"^i\s+(?:don't|do\s+not|never)\s+want\s+you\s+to\s+(?:ever\s+)?(?P<rest>.+)")
_MY_PREFERENCE = re.compile(
    r"^my\s+(?:personal\s+|general\s+|strong\s+)?(?:preference|preferences|preferred\s+[\w-]+(?:\s+[\w-]+)?|"
    r"(?:all-time\s+)?favou?rite\s+(?!part|thing|bit|moment|scene|line|one|episode|chapter)[\w-]+(?:\s+[\w-]+)?|"
    r"go-to\s+[\w-]+(?:\s+[\w-]+)?|default\s+[\w-]+)\s+(?:is|are|has\s+always\s+been|will\s+always\s+be)\b"
    r"(?P<rest>.*)"
)
_KEEP = re.compile(
    r"^(?:i'm|i\s+am|i)\s+(?:(?:really\s+)?(?:trying|aiming|hoping|working|striving|looking)\s+to|try\s+to|"
    r"aim\s+to|want\s+to|need\s+to|have\s+to|'d\s+like\s+to|would\s+like\s+to|like\s+to|must|plan\s+to)\s+"
    r"(?:keep|stay|remain)\s+(?P<obj>.{0,80}?)\b(?:under|below|beneath|within|less\s+than|fewer\s+than|"
    r"no\s+more\s+than|at\s+most|lightweight|light|lean|small|minimal|to\s+a\s+minimum|simple|short|concise|"
    r"fast|low|free\s+of|free\s+from|dependency-free|accessible|maintainable|readable|portable|consistent|"
    r"offline|private|secure)\b"
)
_HABIT_CHOICE = re.compile(
    r"^i\s+(?:generally|usually|typically|normally|always|mostly|tend\s+to)\s+(?:go\s+with|stick\s+(?:with|to)|"
    r"opt\s+for|lean\s+(?:towards?|toward)|favou?r|choose|pick)\b(?P<rest>.*)"
)
# objects that point at something in the current exchange: choosing among options is not a standing preference
_DEICTIC = re.compile(
    r"^(?:(?:not\s+)?to\s+(?:think|say|believe|see|view|look\s+at|call\s+it|describe|keep\s+it)\b|"
    r"(?:not\s+)?(?:to\s+)?(?:it|this|that|these|those|them|one|either|neither|both|yours|mine|option|"
    r"version|whichever)\b|(?:the|your|this|that)\s+(?:first|second|third|fourth|fifth|last|former|latter|other|"
    r"previous|next|original|above|below|same|earlier|later|latest|new|old)\b|"
    r"(?:the|your|this|that)\s+(?:[\w-]+\s+){0,2}(?:version|option|one|approach|solution|answer|suggestion|idea|"
    r"draft|design|example|method|way|variant|alternative|proposal|layout|response|reply|wording|phrasing|"
    r"title|name)\s*[.!]*$)"
)
_VAGUE = frozenset(
    "not to it this that them you if i we do say talk about discuss answer comment share go into get know think "
    "see be done with so a the just right now yet".split()
)


# sayings with always/never that are life advice to the listener, not a rule for an assistant
_MOTTO = re.compile(
    r"^(?:give\s+up|say\s+never|look\s+back|settle|quit|stop\s+(?:believing|dreaming|learning|trying|growing|"
    r"smiling)|be\s+(?:afraid|scared|ashamed)|forget\s+(?:who|where|what)\s+you|lose\s+hope)\b"
)


# corrections: a change of mind about how to answer ("Actually, answer in English again.", "No, use tabs instead.")
_CORRECTION_OPENER = re.compile(
    r"^(?:actually|no|nope|wait|sorry|oops|hmm|on\s+second\s+thought|scratch\s+that|change\s+of\s+plans?|"
    r"correction|i\s+changed\s+my\s+mind)\b[\s,.:!-]*"
)
_CORRECTION_MARK = re.compile(r"\b(?:again|instead|anymore|any\s+more|after\s+all|back\s+to|as\s+before)\b")
_CORRECTION_VERBS = frozenset(
    "answer reply respond write speak talk use switch go call address format explain translate give keep stick "
    "show list return revert change put spell number".split()
)
_ANSWER_VERBS = frozenset("answer reply respond speak talk write".split())
_GO_BACK = re.compile(rf"^{_PLEASE}(?:go|switch|change|revert|return)\s+back\s+to\b|^let's\s+go\s+back\s+to\b")
# revocations: a standing instruction or preference withdrawn ("Forget what I said about French.", "Never mind the
# bullet points.", "I'm no longer vegetarian.", "I don't need answers in French anymore.")
_REVOKE = re.compile(
    rf"^{_PLEASE}(?:forget|ignore|disregard|drop|scrap)\s+(?:what|everything|anything)\s+i\s+(?:said|told\s+you|"
    r"mentioned|asked(?:\s+for)?|wrote)\s+(?:earlier\s+|before\s+)?(?:about|regarding|on)\s+(?P<t1>.+)|"
    rf"^{_PLEASE}(?:forget|ignore|disregard|drop|scrap)\s+(?:about\s+)?(?:the|my|that)\s+(?P<t2>.+?)\s+"
    r"(?:thing|rule|instruction|request|preference|bit|part)\b|"
    r"^never\s*mind\s+(?:about\s+)?(?:the|my|that)\s+(?P<t3>.+?)(?:\s+(?:thing|rule|instruction|request|part|bit))?$|"
    r"^i(?:'m|\s+am)\s+no\s+longer\s+(?!sure|certain|able|convinced|following|interested\s+in\s+(?:it|this|that))"
    r"(?P<t4>.+)|"
    r"^i\s+(?:no\s+longer|don't|do\s+not)\s+(?:want|need|prefer|like|eat|drink|use)\s+(?P<t5>.+?)\s+"
    r"(?:anymore|any\s+more)$|"
    r"^i\s+no\s+longer\s+(?:want|need|prefer|like|eat|drink|use)\s+(?P<t6>.+)|"
    r"^(?:you\s+)?(?:no\s+longer\s+need|don't\s+need|do\s+not\s+need|no\s+need)\s+to\s+(?P<t7>.+?)"
    r"(?:\s+(?:anymore|any\s+more))?$"
)
# a fact about the speaker with a request to keep it ("I'm vegetarian, keep that in mind.")
_FACT_KEEP = re.compile(
    r"^(?P<fact>(?:i|i'm|i've|i'd|my|we|we're|we've|our)\b.+?)[\s,;:-]+(?:so\s+|and\s+)?(?:please\s+)?"
    r"(?:(?:keep|bear)\s+(?:that|this|it)\s+in\s+mind|remember\s+(?:that|this)|don't\s+forget\s+(?:that|this)|"
    r"note\s+(?:that|this)(?:\s+down)?|for\s+future\s+reference)\b[\s.!]*(?:please)?[\s.!]*$"
)
_FACT_AFTER = re.compile(
    r"^(?:please\s+)?(?:remember|note|keep\s+in\s+mind|don't\s+forget|fyi|for\s+future\s+reference)\s*[:,-]\s*"
    r"(?P<fact>(?:i|i'm|i've|i'd|my)\b.+)"
)


def revocation_topic(statement: str) -> str | None:
    """What a revocation withdraws ("Forget what I said about French." -> "french"), or None when the statement
    revokes nothing."""
    text = _strip_prefix(re.sub(r"\s+", " ", statement.strip().lower().replace("\u2019", "'"))).rstrip(" .!?,;:")
    m = _REVOKE.match(text)
    if m is None:
        return None
    topic = next(g for g in m.groups() if g)
    return re.sub(r"^(?:the|my|that|your|using|to)\s+", "", topic.strip()).strip() or None


def fact_to_keep(sentence: str) -> bool:
    """Whether a whole sentence states a fact about the speaker and asks to keep it ("I'm vegetarian, please
    keep that in mind.", "Please remember: I work night shifts."), whatever its clauses."""
    text = re.sub(r"\s+", " ", sentence.strip().lower()).rstrip(" .!?,;:")
    if not text or sentence.rstrip().endswith("?") or _HYPOTHETICAL.match(text):
        return False
    fact = _FACT_KEEP.match(_strip_prefix(text)) or _FACT_AFTER.match(_strip_prefix(text))
    return fact is not None and _own_fact(fact.group("fact"))


_LISTENER = re.compile(r"\b(?:you|your|yours|yourself|yourselves|you're|you'll|you've|you'd|ya|u)\b")


def to_listener(text: str) -> bool:
    """Whether a statement names the person it is said to (you, your, yourself): "I'm always here for you",
    "I'll always support you", "you can always count on me" are about the two of them, a promise or
    encouragement, not a durable trait of the speaker's to keep."""
    return _LISTENER.search(text.lower().replace("\u2019", "'")) is not None


# "I'll keep that in mind", "We will definitely keep that in mind": the speaker keeps what the other said
_KEEPER = re.compile(
    r"^(?:i|we)(?:'ll|'d|\s+(?:will|would|shall|can|could|must|should|need\s+to|have\s+to|want\s+to|"
    r"(?:'ll|will)\s+try\s+to|try\s+to))?(?:\s+(?:\w+ly|also|too|always|sure|just|really|for\s+sure))*$"
)


def _own_fact(fact: str) -> bool:
    """Whether what a speaker asks to keep ("I'm vegetarian" of "I'm vegetarian, keep that in mind") is a fact
    about the speaker alone: not another's words (`reports`), not about the listener (`to_listener`), and not
    only the one who keeps it ("I'll definitely keep that in mind": a promise to remember the other's words)."""
    return not _REPORTING.search(fact) and not to_listener(fact) and not _KEEPER.match(fact.strip())


def reports(clause: str) -> bool:
    """Whether a clause introduces another's words ("The guide says", "My boss told me"): the clause after it
    is theirs, not the speaker's."""
    return bool(
        re.search(
            r"\b(?:says|said|wrote|writes|told\s+(?:me|us)|tells\s+(?:me|us)|claims|reads)\s*$",
            clause.strip().lower().rstrip(" :,"),
        )
    )


def corrects(statement: str) -> bool:
    """Whether a statement says it changes an earlier one: it opens with actually / no / on second thought ...,
    or says again / instead / back to ("Actually, answer in English again.")."""
    text = re.sub(r"\s+", " ", statement.strip().lower().replace("\u2019", "'"))
    return bool(_CORRECTION_OPENER.match(text) or _CORRECTION_MARK.search(text) or _GO_BACK.match(text))


def topic_stems(text: str) -> set[str]:
    """The stems (services/text.stem, Porter) of a text's content words, names included (for revocations)."""
    words = re.findall(r"[a-z][a-z'+#-]*", fold(text).replace("\u2019", "'"))
    return {stem(w.strip("'-")) for w in words if w not in _KEY_STOP and len(w) > 1}


@dataclass(frozen=True)
class Match:
    """A clause that states an instruction or preference: its kind and the name of the rule that matched."""

    kind: Kind
    rule: str


def _has_object(rest: str) -> bool:
    """Whether a preference's object says something durable: not a pointer into the current exchange
    (`this one`, `the second option`, `it`) and not a bare refusal (`not to talk about it`)."""
    rest = rest.strip(" ,.!:;")
    for lead in ("it if ", "if ", "that ", "you to ", "you ", "go with ", "pick ", "choose ", "take "):
        if rest.startswith(lead):
            rest = rest[len(lead) :]
            break
    # "I prefer it over Foundation": a comparison with a named alternative is a standing preference
    compared = re.match(
        r"^(?:it|this|that|them|these|those)\s+(?:over|to|rather\s+than|instead\s+of)\s+(?P<other>.+)", rest
    )
    if compared:
        rest = compared.group("other")
    if not rest or _DEICTIC.match(rest):
        return False
    return any(w not in _VAGUE for w in _words(rest))


def _imperative_rest(rest: str) -> bool:
    """Whether what follows a lead-in (`from now on`, a standing condition) is a rule for the assistant: an
    imperative, always/never, don't, a request to `you`, or a first-person wish about the answers."""
    rest = _strip_prefix(rest)
    if _ALWAYS_NEVER.match(rest) or _DONT.match(rest):
        return True
    if re.match(
        r"^(?:you\s+(?:should|must|will|'ll|need\s+to|have\s+to|are\s+to|can)|i\s+(?:want|need|'d\s+like|"
        r"would\s+like|expect)\s+(?:you|all|every|your|the)|let's|answers?\s+should|responses?\s+should)\b",
        rest,
    ):
        return True
    head = _HEAD.match(rest)
    return head is not None and _verb_at(rest[head.end() :])


def match_clause(clause: str, *, question: bool, condition: str | None, durable_lead: bool) -> Match | None:  # noqa: C901 (one branch per clause pattern; the rule table in the module doc)
    """The statement a clause makes, or None. clause: the clause's own text (any case); question: it asks
    something; condition: the text of the condition clause that precedes it in the sentence (`When I ask
    about X`), if any; durable_lead: the clause before it was only a lead-in such as `From now on`."""
    text = re.sub(r"\s+", " ", clause.strip().lower()).rstrip(" .!?,;:")
    raw = text
    text = _strip_prefix(text)
    if not text or _HYPOTHETICAL.match(text):
        return None
    if not question and not _QUESTION_START.match(text) and condition is None:
        if revocation_topic(text) is not None:
            return Match("instruction", "revoke")
        fact = _FACT_KEEP.match(text) or _FACT_AFTER.match(text)
        if fact and _own_fact(fact.group("fact")):
            return Match("preference", "keep-in-mind")
        opener = _CORRECTION_OPENER.match(raw)
        if opener:
            text = _strip_prefix(raw[opener.end() :]) or text
        words = _words(text[:40])
        if (
            _GO_BACK.match(text)
            or (opener and words and words[0] in _CORRECTION_VERBS and _CORRECTION_MARK.search(text))
            or (words and words[0] in _ANSWER_VERBS and re.search(r"\bagain$", text))
        ) and not _ONE_OFF.search(text):
            return Match("instruction", "correction")
    if _ONE_OFF.search(text):
        return None
    if condition is not None and not _STANDING_CONDITION.match(_strip_prefix(condition.strip().lower())):
        return None  # `If I were you, I'd rather ...`, `When I was young, I always preferred ...`
    standing = condition is not None or durable_lead
    lead = _DURABLE_LEAD.match(text)
    if lead and text[lead.end() :]:
        standing, text = True, text[lead.end() :]
    if question or _QUESTION_START.match(text):
        # a question states nothing, unless it is a polite request that says it is for good
        if re.match(r"^(?:can|could|would|will)\s+you\s+(?:please\s+)?", text) and (_DURABLE.search(text) or standing):
            head = _HEAD.match(text)
            if head and _verb_at(text[head.end() :]):
                return Match("instruction", "polite-standing-request")
        return None
    if _REPORTING.search(text[:40]) and not text.startswith(("i ", "i'", "please", "always", "never")):
        return None

    call = _CALL_ME.match(text)
    if call:
        name = call.group("name") or call.group("name2")
        start = clause.lower().find(name)
        if start >= 0 and clause[start : start + 1].isupper():
            return Match("instruction", "call-me")
    fact = _REMEMBER_FACT.match(text)
    if fact:
        said = re.sub(r"^.*?\b(?:remember|keep\s+in\s+mind|forget|note)\s+(?:that\s+)?", "", text, count=1)
        inner = match_clause(said, question=False, condition=None, durable_lead=False)
        if inner is not None and inner.kind == "preference":
            return inner
        # "Remember that I'm there for you": about the listener, kept only as what it states itself
        return inner if to_listener(said) else Match("instruction", "remember-that")
    stop = re.match(rf"^{_PLEASE}stop\s+(?P<verb>[a-z]+)ing\s+(?P<rest>\w.*)", text)
    if (
        stop
        and _gerund_verb(stop.group("verb"))
        and not re.match(r"^(?:it|that|this|about\s+(?:it|that))\b", stop.group("rest"))
    ):
        return Match("instruction", "stop-doing")

    m = _ALWAYS_NEVER.match(text)
    if m and _verb_at(m.group("rest")):
        return Match("instruction", "always-never")
    m = _DONT.match(text)
    if m and _verb_at(m.group("rest")):
        if m.group("ever"):
            return Match("instruction", "dont-ever")
        if re.search(r"\bunless\b", text):
            return Match("instruction", "dont-unless")
        if standing or _DURABLE.search(text) or _GENERIC_OUTPUT.search(text):
            return Match("instruction", "dont-standing")
    if re.match(rf"^{_PLEASE}(?:always\s+)?remember\s+to\s+", text):
        rest = re.sub(rf"^{_PLEASE}(?:always\s+)?remember\s+to\s+", "", text)
        if _verb_at(rest):
            return Match("instruction", "remember-to")

    for rule, pattern in (("prefer", _PREFER), ("rather", _RATHER), ("habit-choice", _HABIT_CHOICE)):
        m = pattern.match(text)
        if m and _has_object(m.group("rest")):
            return Match("preference", rule)
    if _LIKE_MY.match(text) or _LIKE_WHEN.match(text) or _LIKE_OUTPUTS.match(text):
        return Match("preference", "like")
    m = _WANT_ALL.match(text)
    if m and _has_object(m.group("rest")):
        return Match("preference", "want-all")
    if _WANT_OUTPUTS.match(text):
        return Match("preference", "want-outputs")
    m = _DONT_WANT.match(text)
    if m and _verb_at(m.group("rest")):
        return Match("preference", "dont-want")
    m = _MY_PREFERENCE.match(text)
    if m and _has_object(m.group("rest")):
        return Match("preference", "my-preference")
    m = _KEEP.match(text)
    if m and _has_object(m.group("obj") or "x") and not re.match(r"^(?:it|things|this|that)\b", m.group("obj")):
        return Match("preference", "keep-under")

    if standing and _imperative_rest(text):
        return Match("instruction", "standing-lead" if condition is None else "standing-condition")
    head = _HEAD.match(text)
    if (
        head
        and _verb_at(text[head.end() :])
        and (_DURABLE.search(text) or _always_at(text[head.end() :]) or _GENERIC_OUTPUT.search(text))
    ):
        return Match("instruction", "imperative-standing")
    if re.match(r"^you\s+(?:should|must|need\s+to|have\s+to)\b", text) and re.search(
        r"\b(?:from\s+now\s+on|going\s+forward|in\s+(?:the\s+)?future|when(?:ever)?\s+i\s+ask|in\s+your\s+"
        r"(?:answers|responses|replies))\b",
        text,
    ):
        return Match("instruction", "you-should-standing")
    return None


def is_lead_in(clause: str) -> bool:
    """Whether a clause is only a lead-in for the next one: `From now on`, `Going forward`, `By default`."""
    text = _strip_prefix(re.sub(r"\s+", " ", clause.strip().lower()))
    lead = _DURABLE_LEAD.match(text)
    return lead is not None and not text[lead.end() :].strip(" ,:")


def is_condition(clause: str) -> bool:
    """Whether a clause is a condition (`If ...`, `When I ask about X`, `Every time ...`)."""
    return bool(_CONDITION.match(_strip_prefix(re.sub(r"\s+", " ", clause.strip().lower()))))


def hypothetical_sentence(sentence: str) -> bool:
    """Whether a whole sentence is set in a hypothetical world (`Suppose ...`, `What if ...`, `Imagine ...`)."""
    return bool(_HYPOTHETICAL.match(_strip_prefix(re.sub(r"\s+", " ", sentence.strip().lower()))))


# a line of code or a code comment: "// never call this from the UI thread", "def f(x):  # always close it"
_COMMENT_START = re.compile(r"^\s*(?://|/\*|<!--|#\s|--\s|;;)")
_CODE_SIGNS = re.compile(
    r"\b(?:def|function|class|void)\s+\w+\s*\(|\b(?:return|const|let|var)\s+\w+\s*[=;(]|\w\([^()]*\)\s*[:;{.]|[{}]|"
    r";\s*$|;\s+\w|\b[a-z_][\w.]*\s*=\s*[\w\"'\d]|\s(?:#|//)\s"
)
# a request for a text whose content is a rule: "Write an email saying that from now on ...", "Draft a rule for
# the kitchen: never ...": the rule is the text's, not one for the assistant's answers
_CONTENT_REQUEST = re.compile(
    r"^(?:(?:can|could|would)\s+you\s+)?(?:please\s+)?(?:write|draft|compose|create|make|prepare|generate|add|"
    r"send|post|put\s+together|set\s+up|print)\s+(?:me\s+)?(?:a|an|the|some|my|our)\s+(?:[\w'-]+\s+){0,6}?"
    r"(?:email|e-mail|message|note|sign|poster|policy|rules?|memo|letter|text|post|tweet|announcement|reminder|"
    r"notice|readme|comment|section|checklist|filter|banner|slogan|motto|caption|label|list)\b.{0,60}?"
    r"(?:\bsaying\b|\b(?:that|which)\s+(?:says|reads|tells|states|reminds|asks)\b|\bstating\b|\btelling\b|"
    r"\breminding\b|\bannouncing\b|\bto\s+say\b|:)"
)


def not_own_rule(sentence: str) -> bool:
    """Whether a (masked) sentence holds a rule that is not the speaker's rule for the assistant's answers, by its
    form: a line of code or a code comment ("// never call this from the UI thread", two or more marks of code,
    such as a call, braces, an assignment, a keyword), or a request for a text whose content is the rule ("Write
    an email to the team saying that from now on ...", "Draft a rule for the kitchen: never ...")."""
    text = _strip_prefix(re.sub(r"\s+", " ", sentence.strip().lower()))
    if _COMMENT_START.match(sentence) or _CONTENT_REQUEST.match(text):
        return True
    return len(_CODE_SIGNS.findall(sentence)) >= 2


# --- subject keys ---------------------------------------------------------------------------------------------------

_KEY_STOP = frozenset(
    """
a an the and or but if of to in on at for with by from as is are was were be been being it its this that these
those i me my mine we our you your yours he him his she her they them their what which who whom do does did
have has had not no so too very just can will would should could about into than then there here when where
why how all any both each more most other some such only own same also up down out over again i'm i'd i've
i'll you're you'll don't doesn't won't can't cannot always never ever please pls kindly from now going
forward moving future onwards henceforth default prefer preference preferences preferred rather like love
want need expect appreciate make sure remember forget note keep-in-mind whenever every time each anytime
ask asking asked question questions request unless otherwise rest conversation chat session point onward
really generally usually typically normally personally actually honestly definitely much still mostly tend
try trying aim aiming hoping working striving must let's let one thing things ok okay also stuff something
didn't doesn't isn't aren't wouldn't shouldn't hate dislike enjoy favourite favorite stop go under over below
within than less fewer least most instead actually feel free again anymore back longer mind forget said
ignore told mentioned
""".split()
)


def subject_key(statement: str, limit: int = 6) -> str:
    """A short normalised key of what a statement is about: the stems (services/text.stem, Porter) of its content
    words in order, without function words, the words of the statement forms (always, prefer, from now on...),
    numbers and capitalised names (the value that varies: French/English, Sam, 100KB). At most `limit` stems; may be
    empty ("I prefer Bootstrap over Foundation")."""
    tokens = re.findall(r"[\w'+#.-]*[\w+#]", statement.replace("\u2019", "'"))
    stems: list[str] = []
    for i, token in enumerate(tokens):
        if any(ch.isdigit() for ch in token):
            continue
        if i > 0 and token[0].isupper() and not token.isupper():
            continue  # a name (French, Bootstrap, Sam); acronyms (CSS, API) stay
        word = fold(token).strip(".'-")
        if word in _KEY_STOP or len(word) < 2:
            continue
        term = stem(word)
        if term not in stems:
            stems.append(term)
    return " ".join(stems[:limit])
