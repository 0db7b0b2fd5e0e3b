"""A classifier that finds standing instructions and preferences the rules' patterns were not written for.

Three classes (`none`, `instruction`, `preference`; corrections and revocations are instructions) by multinomial
logistic regression over one sentence's features (`features`): its 384-d all-MiniLM-L6-v2 vector (the local
embedder, services/embedding.py), a few marks of its form (`form_marks`: a standing marker, `you`, first person,
a question mark, a list or heading mark, a plan, thanks, the past, "when I ask", length, a pointer into the
current exchange, a general object, an opening verb, a reaction such as "sounds good") and its words and word
pairs hashed into `BUCKETS` slots.

The weights are trained by `bench/instruction_classifier.py` (one command, deterministic) on its training sets
(bench/data/instruction_statements_train.tsv and the first two former test sets, `TRAIN_SETS` there) and shipped
in services/data/instruction_classifier.npz, read without network. bench/RESULTS.md, "Instruction detection on a
frozen test set", has how the design and the threshold were first chosen (on the validation set); the section
"Instruction detector, fifth round" how they were chosen since (on validation and the third test set, a
development set now) and what the shipped detector scores.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from models.api import Message
from models.instructions import Detected, InstructionKind
from services import instruction_rules as rules
from services.embedding import Embedder
from services.instructions import PatternDetector, between_people, owned, same_speaker
from services.speakers import is_human

CLASSES = ("none", "instruction", "preference")
"""The classifier's classes, in the order of its probability columns."""
BUCKETS = 4096
"""Slots the sentence's words and word pairs are hashed into (crc32)."""
WEIGHTS = Path(__file__).resolve().parent / "data" / "instruction_classifier.npz"
"""The shipped weights: arrays `weights` float32 (384 + len(form_marks) + BUCKETS + 1, 3), the last row the bias,
and `threshold` (a scalar)."""
MAX_WORDS = 20
"""Longer sentences are left to the rules: a standing rule is said briefly, and in real chats the long sentences
the classifier would keep are stories and worries (chosen on the validation set, where it costs nothing, and on
BEAM 100K chats 11-20, where it halves what the classifier adds)."""

_STANDING = re.compile(
    r"\b(always|never|from now on|going forward|from here on|in the future|by default|whenever|every time|"
    r"each time|any ?more|no longer|again|instead|keep in mind|bear in mind|remember|for the rest)\b"
)
_POINTER = re.compile(r"\b(this|that|these|those|it|above|below|here|today|tonight|tomorrow|now|just|once|one)\b")
_GENERAL = re.compile(
    r"\b(all|every|any|each|everything|anything|answers?|repl(y|ies)|responses?|snippets|examples|recipes|emails|"
    r"dates|times|prices|suggestions|code|whenever|always|never|only|no)\b"
)
_NOT_A_VERB = re.compile(
    r"^(i|i'm|my|the|a|an|it|this|that|we|you|he|she|they|what|how|why|when|where|which|who|is|are|do|does|can|"
    r"could|would|should|will|thanks|ok|okay|yes|no|so|and|but)\b"
)


_REACTION = re.compile(
    r"^(yeah|yes|yep|yup|ok|okay|sure|cool|nice|great|perfect|hmm|oh|ah|alright|right)\b|"
    r"\b(sounds?|seems?|looks?) (good|great|perfect|fine|amazing|doable|like|better|right)\b|\bworks? for me\b"
)


def form_marks(sentence: str) -> list[float]:
    """14 marks of a sentence's form, each 0 or 1 but the length (words / 60, at most 1): what an averaged
    sentence vector blurs (who is addressed, mood, a standing marker, a pointer into the current exchange)."""
    s = sentence.strip()
    low = s.lower()
    return [
        float(bool(_STANDING.search(low))),
        float(bool(re.search(r"\b(you|your)\b", low))),
        float(bool(re.match(r"^(i|i'm|i've|i'd|my)\b", low))),
        float(s.endswith("?")),
        float(bool(re.match(r"^([-*#|>]|\d+\.|\*\*)", s))),
        float(
            bool(
                re.search(
                    r"\b(i'll|i will|i'm going to|i am going to|let's|i might|i think i'll|i'm planning|"
                    r"i'm thinking)\b",
                    low,
                )
            )
        ),
        float(bool(re.search(r"\b(thanks|thank you|sounds good|got it|great|perfect)\b", low))),
        float(bool(re.search(r"\b(yesterday|last (week|year|month)|ago|used to|when i was)\b", low))),
        float(bool(re.search(r"\bwhen(ever)? i (ask|say|send|paste|share|mention)\b", low))),
        min(len(low.split()), 60) / 60,
        float(bool(_POINTER.search(low))),
        float(bool(_GENERAL.search(low))),
        float(bool(re.match(r"^(please )?[a-z]+\b", low)) and not _NOT_A_VERB.match(low)),
        float(bool(_REACTION.search(low))),
    ]


FORM_MARKS = len(form_marks(""))


def hashed_words(sentence: str) -> np.ndarray:
    """float32 (BUCKETS,): 1 in the slot of each lower-cased word, word pair and first word (crc32 mod BUCKETS)."""
    w = re.findall(r"[a-z']+|[?!:*#\-|]", sentence.lower())
    tokens = [*w, *(f"{a} {b}" for a, b in zip(w, w[1:], strict=False)), "^" + w[0] if w else "^"]
    out = np.zeros(BUCKETS, dtype=np.float32)
    for token in tokens:
        out[zlib.crc32(token.encode()) % BUCKETS] = 1.0
    return out


def features(sentences: Sequence[str], vectors: np.ndarray) -> np.ndarray:
    """float64 (n, dimension + FORM_MARKS + BUCKETS): each sentence's MiniLM vector (vectors, (n, dimension)),
    form marks and hashed words."""
    marks = np.array([form_marks(s) for s in sentences], dtype=np.float64).reshape(len(sentences), FORM_MARKS)
    words = np.array([hashed_words(s) for s in sentences], dtype=np.float64).reshape(len(sentences), BUCKETS)
    return np.hstack([np.asarray(vectors, dtype=np.float64), marks, words])


@dataclass(frozen=True)
class LinearClassifier:
    """weights: float (features + 1, 3), the last row the bias; threshold: a sentence states something when
    P(instruction) + P(preference) > threshold."""

    weights: np.ndarray
    threshold: float

    @property
    def width(self) -> int:
        """The length of the feature rows it reads."""
        return int(self.weights.shape[0]) - 1

    @property
    def dimension(self) -> int:
        """The length of the sentence vectors it reads (384 for MiniLM)."""
        return self.width - FORM_MARKS - BUCKETS

    def probabilities(self, rows: np.ndarray) -> np.ndarray:
        """rows: float (n, width) `features` -> float64 (n, 3), rows summing to 1, columns in CLASSES order.
        Raises ValueError when the rows' width is not `width`."""
        x = np.asarray(rows, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.width:
            raise ValueError(f"expected rows of shape (n, {self.width}), got {x.shape}")
        w = np.asarray(self.weights, dtype=np.float64)
        z = x @ w[:-1] + w[-1]
        z -= z.max(axis=1, keepdims=True)
        e = np.exp(z)
        out: np.ndarray = e / e.sum(axis=1, keepdims=True)
        return out

    def decide(self, rows: np.ndarray, threshold: float | None = None) -> list[InstructionKind | None]:
        """Per row: `instruction` or `preference` (the likelier) when the two together have probability above
        threshold (default: the classifier's), else None. Raises ValueError as `probabilities`."""
        limit = self.threshold if threshold is None else threshold
        return [
            None if p[1] + p[2] <= limit else "instruction" if p[1] >= p[2] else "preference"
            for p in self.probabilities(rows)
        ]

    def save(self, path: Path = WEIGHTS) -> None:
        """Write the weights (float32) and threshold to an .npz file."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as f:
            np.savez_compressed(f, weights=self.weights.astype(np.float32), threshold=np.float64(self.threshold))


@cache
def shipped() -> LinearClassifier:
    """The classifier shipped with Pyramind (WEIGHTS), read once. Raises OSError when the file is missing."""
    with np.load(WEIGHTS, allow_pickle=False) as data:
        return LinearClassifier(weights=np.array(data["weights"]), threshold=float(data["threshold"]))


def not_a_statement(sentence: str) -> bool:
    """Whether a (masked) sentence is, by its form alone, no statement of the speaker's own standing rule: a
    question, a hypothetical, another's reported words or a one-off request (`this time`, `for now`) - the
    rejections the rules apply before any of their patterns (services/instruction_rules.py)."""
    if rules.hypothetical_sentence(sentence):
        return True
    parts = rules.clauses(sentence)
    if not parts or any(c.question for c in parts):
        return True
    if rules._ONE_OFF.search(re.sub(r"\s+", " ", sentence.strip().lower())):
        return True
    for c in parts:
        text = rules._strip_prefix(re.sub(r"\s+", " ", sentence[c.start : c.end].strip().lower()))
        if (
            rules._QUESTION_START.match(text)
            or rules._HYPOTHETICAL.match(text)
            or rules.reports(sentence[c.start : c.end])
        ):
            return True
        if rules._REPORTING.search(text[:40]) and not text.startswith(("i ", "i'", "please", "always", "never")):
            return True
    return False


_WHOLE_REACTION = re.compile(
    r"^(?:(?:yeah|yes|yep|ok|okay|sure|cool|nice|great|perfect|hmm|oh|ah|alright|right)\b[,!.]?\s*)*"
    r"(?:(?:i think|i guess|honestly|so)\s*,?\s*)?"
    r"(?:(?:(?:that|this|it|these|those|they|the|your|a|an)\s+)?(?:[\w'-]+\s+){0,3}?"
    r"(?:sounds?|seems?|looks?)\s+(?:\w+\s+)?"
    r"(?:good|great|perfect|fine|amazing|doable|ideal|right|nice|helpful|useful|like a (?:plan|good idea))"
    r"|(?:that|this|it)(?: plan| one| time)? works)"
    r"(?:\s+(?:for|to|with)\s+me)?\s*[.!]*$"
)
_HEDGED_PLAN = re.compile(
    r"^(?:so,? |then,? )?(?:i might|maybe i'll|i guess i'll|i think i'll|i'll probably|i may|i'll (?:also )?try)\b"
)
# the speaker's own next step, said to no one: "Then I'll book the dentist for Friday."
_OWN_PLAN = re.compile(
    r"^(?:(?:so|then|and|now|ok|okay|alright)\b,? )*(?:i'll|i will|i'm going to|i am going to)\b"
    r"(?! (?:need|want|require|expect|only)\b)"
)
# what the speaker expects to happen, not how things should be: "I think the hard part will be the first week."
_EXPECTATION = re.compile(
    r"^(?:(?:so|and|yeah|honestly)\b,? )*i (?:think|guess|believe|feel like|figure)\b,? (?!i\b|i'|you\b|we\b)"
    r"(?:[\w'\"-]+,? ){1,14}?(?:will|'ll|might|could)\b"
)
_EFFECT = re.compile(
    r"\b(?:will|should|would|could|might) (?:really |definitely |probably |also |certainly )?"
    r"(?:help|make (?:a|all the) (?:big |huge |real )?difference)\b"
)
# a choice among what was proposed: "Let's go with the blue one.", "Those ideas fit nicely with my plans."
_CHOICE = re.compile(
    r"^(?:(?:ok|okay|alright|great|perfect|yes|yeah)\b,? )*(?:let's (?:go with|pick|choose|book)\b|"
    r"(?:these|those|that|this|your) (?:[\w-]+ ){0,2}?(?:suggestions?|ideas?|options?|tips?|steps?|strategies|"
    r"recommendations?)\b)"
)
_VERDICT_END = re.compile(
    r"\b(?:(?:seems?|looks?|sounds?) (?:pretty |quite |very |really )?(?:reasonable|good|great|fine)|"
    r"works? (?:perfectly|great|fine))[.!]*$"
)


def reacts_or_hedges(sentence: str) -> bool:
    """Whether a sentence is, by its form, a reply to what was just proposed or the speaker's own plan rather than
    a rule for the assistant: the whole of it a verdict on a suggestion ("Yeah, that sounds perfect for me.", "The
    second plan works for me."), a sentence that ends in one ("..., the second policy seems pretty reasonable.",
    "Painting the hall before the carpet goes in works perfectly."), a choice among what was proposed ("Let's go
    with the blue one.", "Those ideas fit nicely with my plans."), a plan of the speaker's own ("I might try the
    app later.", "Then I'll book the dentist for Friday.") or what the speaker expects of something ("I think the
    hard part will be the first week.", "A short walk after lunch should help me focus."), unless it names the
    assistant (`you`) or a standing word (`always`, `from now on`, ...: `standing_request`'s). Such sentences name
    the topic of the suggestion, so MiniLM places them next to real preferences; kept as statements they also
    replace the earlier, real statement on that topic (Superseder). Only the classifier's candidates are checked:
    the rules keep theirs."""
    low = re.sub(r"\s+", " ", sentence.strip().lower())
    if _WHOLE_REACTION.match(low) or _VERDICT_END.search(low) or _HEDGED_PLAN.match(low):
        return True
    if re.search(r"\b(?:you|your)\b", low) and not _CHOICE.match(low) or _STANDING_WORD.search(low):
        return False
    return bool(
        _OWN_PLAN.match(low)
        or _EXPECTATION.match(low)
        or _CHOICE.match(low)
        or (_EFFECT.search(low) and not re.match(r"i\b|i'", low))
    )


_STANDING_REQUEST = re.compile(
    r"^(?:(?:can|could|would|will)\s+(?:you|u)\s+(?:please\s+)?|(?:would\s+you\s+)?mind\s+|"
    r"would\s+it\s+be\s+possible\s+to\s+)"
)
_STANDING_WORD = re.compile(
    r"\b(?:always|never|from\s+now\s+on|going\s+forward|moving\s+forward|from\s+here\s+on|in\s+(?:the\s+)?future|"
    r"every\s+time|each\s+time|whenever|any\s*more|no\s+longer|by\s+default|remember\s+to|every|all\s+(?:your|the)|"
    r"for\s+the\s+rest)\b"
)
# a request to find something out, not to follow a rule: "Could you always tell me why it failed?"
_ASKS_WHY = re.compile(
    r"\b(?:tell|show|explain|check|find\s+out|let\s+me\s+know)\s+(?:me\s+|us\s+)?"
    r"(?:why|what|how|whether|if|which|who|where)\b"
)


def standing_request(sentence: str) -> bool:
    """Whether a (masked) sentence asks the assistant, as a question, to follow a standing rule: "Could you
    always include type hints?", "Would you mind using metric units from now on?" (a request to `you` with a
    standing word). The classifier is asked about such a question; it was trained on requests of this form that
    ask for one change ("Could you make this function always return a list?") as well."""
    low = rules._strip_prefix(re.sub(r"\s+", " ", sentence.strip().lower()))
    return bool(_STANDING_REQUEST.match(low) and _STANDING_WORD.search(low) and not _ASKS_WHY.search(low))


def _candidate(sentence: str) -> bool:
    """Whether the classifier is asked about `sentence` (masked text): it has a letter, at most MAX_WORDS words,
    neither the rules' rejections (`not_a_statement`, unless it is a `standing_request`) nor `reacts_or_hedges`
    call it no statement, and it is no rule of a text or code (`instruction_rules.not_own_rule`)."""
    return bool(
        re.search(r"[^\W\d_]", sentence)
        and len(sentence.split()) <= MAX_WORDS
        and (standing_request(sentence) or not not_a_statement(sentence))
        and not reacts_or_hedges(sentence)
        and not rules.not_own_rule(sentence)
    )


class ClassifierDetector:
    """The rules' statements (PatternDetector), plus the sentences of at most MAX_WORDS words that the classifier
    keeps among those that `not_a_statement` and `reacts_or_hedges` let through; a Detector
    (services/instructions.py). In a chat between people only the preferences of the conversation's `user`
    (`owned`).

    embedder: the local MiniLM (384-d, L2-normalised), called once per `detect` on the candidate sentences.
    classifier: default `shipped()`. Raises ValueError at construction when the embedder's dimension is not the
    classifier's, OSError when the shipped weights are missing."""

    name = "pattern+classifier"
    calls_model = False

    def __init__(
        self,
        embedder: Embedder,
        classifier: LinearClassifier | None = None,
        threshold: float | None = None,
        rules_first: bool = True,
    ) -> None:
        self._classifier = classifier or shipped()
        if embedder.dimension != self._classifier.dimension:
            raise ValueError(f"the classifier reads {self._classifier.dimension}-d vectors, not {embedder.dimension}-d")
        self._embedder = embedder
        self._threshold = threshold
        self._rules_first = rules_first
        self._rules = PatternDetector()

    def detect(
        self, messages: Sequence[Message], conversation_id: str | None = None, user: str | None = None
    ) -> list[Detected]:
        """The statements of the human speakers' messages, in message order, then sentence order; in a chat
        between people only `user`'s preferences (services/instructions.owned)."""
        found: list[tuple[int, int, Detected]] = []
        candidates: list[tuple[int, Message, int, int]] = []
        people = between_people(messages)
        for index, message in enumerate(messages):
            if not is_human(message.who):
                continue
            hits = (
                {d.start: d for d in self._rules.detect_message(message, conversation_id)} if self._rules_first else {}
            )
            found.extend((index, start, d) for start, d in hits.items() if start is not None)
            if people and not same_speaker(message.who, user):
                continue  # `owned` keeps none of this speaker's statements: no sentence of theirs is embedded
            masked = rules.mask(message.content)
            candidates.extend(
                (index, message, start, end)
                for start, end in rules.sentences(masked)
                if start not in hits and _candidate(masked[start:end])
            )
        if candidates:
            texts = [m.content[a:b].strip() for _, m, a, b in candidates]
            rows = features(texts, self._embedder.embed(texts, bulk=True))
            kinds = self._classifier.decide(rows, self._threshold)
            for (index, message, start, end), text, kind in zip(candidates, texts, kinds, strict=True):
                if kind is None:
                    continue
                detected = Detected.of(
                    message,
                    conversation_id,
                    start,
                    end,
                    statement=text,
                    kind=kind,
                    subject=rules.subject_key(text),
                    detector="classifier",
                )
                found.append((index, start, detected))
        found.sort(key=lambda t: (t[0], t[1]))
        return owned([d for _, _, d in found], people, user)
