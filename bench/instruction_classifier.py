"""An experiment of issue 34 (item 4), kept to measure, not shipped: a classifier over MiniLM sentence embeddings
that finds standing instructions and preferences, with and without the rules (services/instruction_rules.py).

Three classes over the 384-d all-MiniLM-L6-v2 vector of one sentence (the local embedder, services/embedding.py):
`none`, `instruction` (corrections and revocations are instructions too) and `preference`. Multinomial logistic
regression with an L2 penalty, trained on the development set only (bench/data/instruction_statements.tsv) each
time the benchmark runs (about 10 s, deterministic: MiniLM on one thread, full-batch Adam from zero weights).
PENALTY and THRESHOLD were chosen by 5-fold cross-validation on the development set before the frozen test set was
scored with them: the highest recall at precision >= 0.95, behind the rules' rejections (`not_a_statement`).

Why it is not the detector (bench/RESULTS.md, "Instruction detection on a frozen test set"): on the frozen test set
it finds 0.69 of the statements at precision 0.92 (the rules: 0.19 at 1.00), but those 337 statements are 46%
positive. In real chats almost no sentence is a standing rule: on BEAM 100K chats 11-20 it returns 622 statements
in 1,650 user messages where the rules return 81, nearly all of its own false ("Thanks for the guidance!",
"I'll definitely ask Laura those questions"), and it stores filler of the datastore tests as instructions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from models.api import Message
from models.instructions import Detected, InstructionKind
from services import instruction_rules as rules
from services.embedding import Embedder
from services.instructions import PatternDetector, between_people, owned
from services.speakers import is_human

CLASSES = ("none", "instruction", "preference")
"""The classifier's classes, in the order of its probability columns."""
LABEL_CLASS = {"none": 0, "instruction": 1, "correction": 1, "revocation": 1, "preference": 2}
"""The labeled sets' labels -> class index."""
PENALTY = 1e-4  # L2 penalty per weight (the bias is not penalised)
THRESHOLD = 0.8  # a sentence states something when P(instruction) + P(preference) > THRESHOLD
STEPS = 3000  # full-batch Adam steps from zero weights
LEARNING_RATE = 0.05


@dataclass(frozen=True)
class LinearClassifier:
    """weights: float64 (dimension + 1, 3), the last row the bias."""

    weights: np.ndarray

    @property
    def dimension(self) -> int:
        """The length of the vectors it reads (384 for MiniLM)."""
        return int(self.weights.shape[0]) - 1

    def probabilities(self, vectors: np.ndarray) -> np.ndarray:
        """vectors: float (n, dimension) embeddings -> float64 (n, 3), rows summing to 1, columns in CLASSES order.
        Raises ValueError when the vectors' width is not `dimension`."""
        x = np.asarray(vectors, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.dimension:
            raise ValueError(f"expected vectors of shape (n, {self.dimension}), got {x.shape}")
        return _softmax(x @ self.weights[:-1] + self.weights[-1])

    def decide(self, vectors: np.ndarray, threshold: float = THRESHOLD) -> list[InstructionKind | None]:
        """Per vector: `instruction` or `preference` (the likelier) when the two together have probability >
        threshold, else None. Raises ValueError as `probabilities`."""
        kinds: list[InstructionKind | None] = []
        for row in self.probabilities(vectors):
            kinds.append(None if row[1] + row[2] <= threshold else "instruction" if row[1] >= row[2] else "preference")
        return kinds


def train(vectors: np.ndarray, classes: np.ndarray, penalty: float = PENALTY, steps: int = STEPS) -> LinearClassifier:
    """Fit the classifier: vectors float (n, d), classes int (n,) in 0..2 (LABEL_CLASS). Full-batch Adam on the mean
    cross-entropy plus penalty * |W|^2 / 2, from zero weights: the same inputs give the same weights. Raises
    ValueError on mismatched shapes."""
    x = np.asarray(vectors, dtype=np.float64)
    y = np.asarray(classes, dtype=np.int64)
    if x.ndim != 2 or y.shape != (x.shape[0],):
        raise ValueError(f"vectors {x.shape} and classes {y.shape} do not match")
    n, d = x.shape
    xb = np.hstack([x, np.ones((n, 1))])
    target = np.eye(len(CLASSES))[y]
    w = np.zeros((d + 1, len(CLASSES)))
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for t in range(1, steps + 1):
        grad = xb.T @ (_softmax(xb @ w) - target) / n
        grad[:-1] += penalty * w[:-1]
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad * grad
        w -= LEARNING_RATE * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
    return LinearClassifier(weights=w)


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    out: np.ndarray = e / e.sum(axis=1, keepdims=True)
    return out


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


class ClassifierDetector:
    """The rules' statements (rules_first), plus the sentences the classifier keeps among those `not_a_statement`
    lets through; a Detector (services/instructions.py). In a chat between people only preferences.

    embedder: MiniLM (384-d, L2-normalised), called once per `detect`. Raises ValueError at construction when the
    embedder's dimension is not the classifier's."""

    name = "pattern+minilm"
    calls_model = False

    def __init__(
        self,
        embedder: Embedder,
        classifier: LinearClassifier,
        threshold: float = THRESHOLD,
        rules_first: bool = True,
    ) -> None:
        if embedder.dimension != classifier.dimension:
            raise ValueError(f"the classifier reads {classifier.dimension}-d vectors, not {embedder.dimension}-d")
        self._embedder = embedder
        self._classifier = classifier
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
        for index, message in enumerate(messages):
            if not is_human(message.who):
                continue
            hits = (
                {d.start: d for d in self._rules.detect_message(message, conversation_id)} if self._rules_first else {}
            )
            found.extend((index, start, d) for start, d in hits.items() if start is not None)
            masked = rules.mask(message.content)
            for start, end in rules.sentences(masked):
                sentence = masked[start:end]
                if start in hits:
                    continue
                if re.search(r"[^\W\d_]", sentence) and not not_a_statement(sentence):
                    candidates.append((index, message, start, end))
        if candidates:
            texts = [m.content[a:b].strip() for _, m, a, b in candidates]
            kinds = self._classifier.decide(self._embedder.embed(texts), self._threshold)
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
                    detector="minilm",
                )
                found.append((index, start, detected))
        found.sort(key=lambda t: (t[0], t[1]))
        return owned([d for _, _, d in found], between_people(messages), user)
