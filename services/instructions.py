"""Standing instructions and preferences: finding them in chat messages, and which later one replaces which.

Users state durable rules once ("Always format code with syntax highlighting", "From now on answer in French",
"I prefer Bootstrap over Foundation", "Call me Sam") and expect them to hold. A detector reads messages and
returns `Detected` statements (models/instructions.py): the offline `PatternDetector` (rules, precision first), the
offline default that adds a classifier to it (services/instruction_classifier.py), or the `OpenAIDetector` (one
chat-completions call per batch, falling back to the rules). `Superseder` decides which
stored `Instruction` a later statement on the same subject replaces. Pure logic: no storage, no HTTP.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

import numpy as np
from pydantic import BaseModel, Field, ValidationError

from models.api import Message
from models.instructions import Detected, Instruction
from models.settings import Settings
from services import instruction_rules as rules
from services.embedding import Embedder
from services.openai_client import openai_client
from services.speakers import is_human
from services.text import words

log = logging.getLogger(__name__)


class Detector(Protocol):
    """What finds standing instructions and preferences in messages.

    name: recorded on each Instruction as `detector`. calls_model: whether `detect` waits on a model (seconds a
    call): the indexer then reads messages in the summary lane after their chunks are committed, not in the
    chunk step (datastore/indexing/steps.py), so chunks stay searchable within the chunk step's time.
    """

    name: str
    calls_model: bool

    def detect(
        self, messages: Sequence[Message], conversation_id: str | None = None, user: str | None = None
    ) -> list[Detected]:
        """The statements of the human speakers' messages, in message order, then sentence order. In a chat
        between people (`between_people`) only the preferences `user` (the speaker whose memory this is) stated,
        none without one (`owned`)."""
        ...


def between_people(messages: Sequence[Message]) -> bool:
    """Whether messages are a chat between people: two or more human speakers (services/speakers.py) and no
    assistant or machinery among them, by speaker or role (an imported chat between friends, as LoCoMo's). An
    assistant that speaks under a persona's name without its role is taken for a person (services/speakers.py)."""
    if any(m.role is not None and not is_human(m.role) for m in messages):
        return False
    return people_only([m.who for m in messages])


def people_only(speakers: Collection[str]) -> bool:
    """Whether speakers are two or more people and no assistant or machinery (see `between_people`)."""
    humans = {s.strip().casefold() for s in speakers if is_human(s)}
    return len(humans) >= 2 and all(is_human(s) for s in speakers)


def same_speaker(a: str | None, b: str | None) -> bool:
    """Whether two speaker names name the same person (case and surrounding spaces ignored)."""
    return a is not None and b is not None and a.strip().casefold() == b.strip().casefold()


def owned(found: Sequence[Detected], people: bool, user: str | None) -> list[Detected]:
    """What a detector keeps of `found`: all of it in a chat with an assistant (`people` False); in a chat
    between people, only the preferences `user` stated (the speaker whose memory this is, the conversation's
    `user`; RememberRequest), none when it is not set. Neither side's encouragement, advice or plans ("And
    remember, I'm always here for you.") is the user's rule, and what one person tells another to do is no
    instruction for the assistant."""
    if not people:
        return list(found)
    if user is None:
        return []
    return [d for d in found if d.kind == "preference" and same_speaker(d.speaker, user)]


class PatternDetector:
    """Finds standing instructions and preferences with rules (services/instruction_rules.py); no model.

    Precision first: a sentence is returned only when one of its clauses opens with one of these forms (after
    discourse openers such as "OK, so", "Also,", "Actually"):

    instructions (rules for the assistant's future answers)
      - always / never + an imperative verb: "Always include version numbers", "Never use external libraries"
      - don't ever ..., don't ... unless ..., don't ... with a standing marker (below)
      - a standing lead-in, then an imperative or a request to `you`: "From now on(,) answer in French",
        "Going forward, ...", "In the future, ...", "By default, ...", "For the rest of this chat, ..."
      - a standing condition about the speaker's own requests, then an imperative: "Whenever I ask about X,
        include Y", "When I paste code, always ...", "Every time I ..., ..."
      - an imperative (please ..., make sure to ..., remember to ..., I want you to ..., you should ...) that
        carries a standing marker (always, never, from now on, every time, by default, in all your answers...)
        or speaks of the assistant's outputs in general ("your answers", "all code snippets", "every response"):
        "Please keep your answers short", "Make sure to always cite sources"
      - remember to ..., remember / keep in mind / note that I ...: "Remember to use metric units"
      - stop + verb-ing + object: "Stop using emojis"
      - call me / address me as / I go by + a capitalised name: "Call me Sam"
      - a polite question that says it is for good: "Could you answer in French from now on?"
    preferences (durable tastes and constraints of the speaker)
      - I prefer / I'd prefer / I'd rather (you) ...: "I prefer Bootstrap over Foundation", "I'd rather you
        didn't use emojis" - not when the object points into the current exchange ("I prefer the second one",
        "I'd rather not talk about it")
      - I like my X (to be / short / with ...), I like it when you ..., I hate it when you ..., I like answers ...
      - I want all / every ..., I want your answers to ..., I don't want you to ...
      - my preference is ..., my preferred / favourite / go-to X is ...
      - I'm trying / I want / I need to keep or stay ... under / within / lightweight / minimal ...
      - I usually go with / stick to / opt for ...

    corrections and revocations (instructions; the Superseder lets them replace what they correct)
      - actually / no / on second thought ... + an imperative with again / instead / back to: "Actually, answer
        in English again."; go / switch back to ...: "Go back to answering in English."
      - forget / ignore what I said about X, never mind the X, I'm no longer X, I don't need X anymore: these
        withdraw X and are no rule of their own (`rules.revocation_topic`)
    facts the speaker asks to keep (preferences): "I'm vegetarian, keep that in mind.", "Please remember: I ..."
      - about the speaker alone: a fact that names the listener (you, your: a promise, support, encouragement
        said to someone, `rules.to_listener`) is about the two of them, kept only where a rule above finds it
        ("Remember: I prefer you to answer briefly.")

    Never (each checked by tests/services/test_instructions.py): in a chat between people (`between_people`),
    any instruction (advice one gives another: "And remember to stay patient ...") and any preference but those
    of the conversation's `user` (`owned`); messages of the assistant and the
    machinery (services/speakers.NON_HUMAN_SPEAKERS); questions ("Should I always use TypeScript?"); hypotheticals and
    conditions about the past or others ("If I always used tabs, would it matter?", "What if I never ...", "Suppose
    I prefer ..."); text in code blocks, inline code, `>` quote lines or quotation marks, and reported speech ("My
    boss said always use tabs"); others' preferences ("My friend prefers Vue"); one-off requests ("Write me a poem",
    "Can you write this in French?", "... this time", "... for now", "... today"); the past ("I always used to ...",
    "I never thought ..."); feelings ("I never know what to do").

    One Detected per matching sentence: text is the sentence, statement the matching clause, start/end the
    sentence's offsets in the message content, subject `rules.subject_key(statement)`.
    """

    name = "pattern"
    calls_model = False

    def detect(
        self, messages: Sequence[Message], conversation_id: str | None = None, user: str | None = None
    ) -> list[Detected]:
        """The statements of the human speakers' messages, in message order, then sentence order. In a chat
        between people (`between_people`) only the preferences of `user`, the speaker whose memory this is, and
        none without one (`owned`): what one person tells another is advice to them, no rule for the assistant."""
        found = [d for message in messages for d in self.detect_message(message, conversation_id)]
        return owned(found, between_people(messages), user)

    def detect_message(self, message: Message, conversation_id: str | None = None) -> list[Detected]:
        """The statements of one message; [] when its speaker is not human."""
        speaker = message.who
        if not is_human(speaker):
            return []
        content = message.content
        masked = rules.mask(content)
        found: list[Detected] = []
        for start, end in rules.sentences(masked):
            hit = _match_sentence(masked[start:end])
            if hit is None:
                continue
            (c_start, c_end), match = hit
            statement = content[start + c_start : start + c_end].strip()
            found.append(
                Detected.of(
                    message,
                    conversation_id,
                    start,
                    end,
                    statement=statement,
                    kind=match.kind,
                    subject=rules.subject_key(statement),
                    detector=self.name,
                    rule=match.rule,
                )
            )
        return found


def _match_sentence(sentence: str) -> tuple[tuple[int, int], rules.Match] | None:
    """The first clause of a masked sentence that states something: ((start, end) in the sentence, match)."""
    if rules.hypothetical_sentence(sentence) or rules.not_own_rule(sentence):
        return None
    if rules.fact_to_keep(sentence):
        body = sentence.strip()
        start = sentence.find(body)
        return (start, start + len(body)), rules.Match("preference", "keep-in-mind")
    condition: str | None = None
    durable_lead = False
    lead_start: int | None = None  # where a condition or lead-in before the clause starts: part of the statement
    reported = False
    for clause in rules.clauses(sentence):
        text = sentence[clause.start : clause.end]
        if reported:
            return None  # "The guide says: never use eval."
        reported = rules.reports(text)
        if rules.is_condition(text):
            condition, durable_lead, lead_start = text, False, clause.start
            continue
        if rules.is_lead_in(text):
            durable_lead = True
            lead_start = clause.start if lead_start is None else lead_start
            continue
        match = rules.match_clause(text, question=clause.question, condition=condition, durable_lead=durable_lead)
        if match is not None:
            return (clause.start if lead_start is None else lead_start, clause.end), match
        condition, durable_lead, lead_start = None, False, None
    return None


# --- the LLM detector ----------------------------------------------------------------------------------------------

_PROMPT = """You find the standing instructions and durable preferences that a user states in chat messages, so \
that an assistant can keep following them in later conversations.

Report a sentence only when the speaker states, in their own voice, a rule for the assistant's future answers \
(kind "instruction": "Always include version numbers", "From now on answer in French", "Call me Sam", \
"Whenever I ask about X, include Y") or a durable taste or constraint of their own (kind "preference": "I prefer \
Bootstrap over Foundation", "I'm trying to keep the bundle under 100KB", "I'd rather you didn't use emojis").
Do NOT report: questions; one-off requests about the current answer ("Write this in French", "Make it \
shorter"); hypotheticals; quoted or reported words of others; other people's preferences; past habits; \
feelings; choices among options just offered ("I prefer the second one"); what the speaker promises or \
says to the listener (support, encouragement: "I've got your back"), which is about the two of them.

Answer with JSON only: {"instructions": [{"message_id": "...", "text": "...", "kind": "instruction" or \
"preference", "subject": "..."}]}, where text is the sentence copied exactly from the message, and subject names \
what it is about in 1-4 lowercase words without the chosen value, so that a later change of mind gets the same \
subject ("answer language" for both "answer in French" and "answer in English"; "css framework" for both \
Bootstrap and Tailwind). An empty list when there is none."""


class _LLMItem(BaseModel):
    message_id: str
    text: str = Field(min_length=2)
    kind: Literal["instruction", "preference"]
    subject: str = ""


class _LLMAnswer(BaseModel):
    instructions: list[_LLMItem]


class OpenAIDetector:
    """Finds standing instructions and preferences with an OpenAI-compatible chat model (SUMMARISER=openai).

    One chat-completions call per batch of human messages (at most `max_batch_chars` characters of content; a
    longer message is sent alone, cut to that length), asking for JSON {"instructions": [{message_id, text,
    kind, subject}]}. The answer is validated: items naming a message not in the batch, or whose text is not in
    that message (also after folding case and spaces, or as one of its sentences sharing 60% of its words), are
    dropped. Model: INSTRUCTION_MODEL, else SUMMARY_MODEL; the client has the settings' timeout and retries.
    When a call still fails (HTTP error, not JSON, wrong shape) that batch goes to the PatternDetector and a
    warning is logged. Raises OpenAIMissingError at construction when the `openai` extra is missing.
    """

    def __init__(
        self, settings: Settings, fallback: PatternDetector | None = None, max_batch_chars: int = 12_000
    ) -> None:
        self._client = openai_client(settings, "SUMMARISER=openai (instruction detection)")
        self.model = settings.instruction_model or settings.summary_model
        self.name = f"openai:{self.model}"
        self.calls_model = True
        self._fallback = fallback or PatternDetector()
        self._max_chars = max_batch_chars

    def detect(
        self, messages: Sequence[Message], conversation_id: str | None = None, user: str | None = None
    ) -> list[Detected]:
        """The statements of the human speakers' messages, in message order, then sentence order; in a chat
        between people only `user`'s preferences (`owned`)."""
        out: list[Detected] = []
        for batch in self._batches([m for m in messages if is_human(m.who)]):
            try:
                out.extend(self._detect_batch(batch, conversation_id))
            except Exception as exc:
                log.warning(
                    "instruction model %s failed (%s); using the pattern detector", self.model, type(exc).__name__
                )
                out.extend(d for m in batch for d in self._fallback.detect_message(m, conversation_id))
        return owned(out, between_people(messages), user)

    def _batches(self, messages: list[Message]) -> list[list[Message]]:
        batches: list[list[Message]] = []
        size = 0
        for message in messages:
            if not batches or size + len(message.content) > self._max_chars:
                batches.append([])
                size = 0
            batches[-1].append(message)
            size += len(message.content)
        return batches

    def _detect_batch(self, batch: list[Message], conversation_id: str | None) -> list[Detected]:
        keys = [m.id or f"#{i}" for i, m in enumerate(batch)]
        by_key = dict(zip(keys, batch, strict=True))
        payload = [
            {"message_id": k, "speaker": m.who, "content": m.content[: self._max_chars]} for k, m in by_key.items()
        ]
        resp = self._client.chat.completions.create(
            model=self.model,
            messages=[
                {"role": "system", "content": _PROMPT},
                {"role": "user", "content": json.dumps(payload, ensure_ascii=False)},
            ],
            temperature=0,
        )
        answer = _parse_answer(resp.choices[0].message.content or "")
        found: list[tuple[int, int, Detected]] = []
        for item in answer.instructions:
            message = by_key.get(item.message_id)
            span = _locate(message.content, item.text) if message is not None else None
            if message is None or span is None:
                log.debug("instruction model %s: dropped an item not found in its message", self.model)
                continue
            start, end, s_start, s_end = span
            statement = message.content[start:end].strip()
            subject = " ".join(re.findall(r"[\w+#-]+", item.subject.lower()))[:60] or rules.subject_key(statement)
            found.append(
                (
                    keys.index(item.message_id),
                    s_start,
                    Detected.of(
                        message,
                        conversation_id,
                        s_start,
                        s_end,
                        statement=statement,
                        kind=item.kind,
                        subject=subject,
                        detector=self.name,
                    ),
                )
            )
        found.sort(key=lambda t: (t[0], t[1]))
        unique: dict[tuple[int, int], Detected] = {}  # a sentence reported twice is one statement
        for index, start, detected in found:
            unique.setdefault((index, start), detected)
        return list(unique.values())


def _parse_answer(content: str) -> _LLMAnswer:
    """The model's JSON answer (fences and a bare list tolerated); raises ValueError / ValidationError."""
    text = content.strip()
    fenced = re.match(r"^```(?:json)?\s*(.*?)\s*```$", text, re.S)
    if fenced:
        text = fenced.group(1)
    data: Any = json.loads(text)
    if isinstance(data, list):
        data = {"instructions": data}
    try:
        return _LLMAnswer.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"unexpected answer shape: {exc.error_count()} errors") from exc


def _locate(content: str, quoted: str) -> tuple[int, int, int, int] | None:
    """(start, end) of `quoted` in content and (start, end) of the sentence(s) holding it, or None.

    Tried in turn: the exact text; the text with case and runs of spaces folded; the sentence of content that
    shares the most words with it, when that is at least 60% of its words."""
    quoted = quoted.strip().strip("\"'\u201c\u201d")
    sents = rules.sentences(rules.mask(content)) or [(0, len(content))]
    start = content.find(quoted)
    if start >= 0:
        end = start + len(quoted)
    else:
        pattern = r"\s+".join(re.escape(w) for w in quoted.split())
        m = re.search(pattern, content, re.I) if pattern else None
        if m is not None:
            start, end = m.span()
        else:
            said = set(words(quoted))
            if not said:
                return None
            overlap = [(len(said & set(words(content[a:b]))) / len(said), a, b) for a, b in sents]
            best = max(overlap)
            if best[0] < 0.6:
                return None
            start, end = best[1], best[2]
    inside = [(a, b) for a, b in sents if a < end and b > start] or [(start, end)]
    return start, end, min(start, inside[0][0]), max(end, inside[-1][1])


def make_detector(settings: Settings, embedder: Embedder | None = None) -> Detector:
    """The detector the settings choose (INSTRUCTION_DETECTOR): OpenAIDetector for `openai`, or for `auto` when
    the summariser is openai (SUMMARISER, else OPENAI_API_KEY set); PatternDetector for `pattern`; else the
    offline default, the rules plus the classifier (services/instruction_classifier.py; bench/RESULTS.md,
    "Instruction detection on a frozen test set"), which reads `embedder`'s vectors when it is the local MiniLM,
    else a local MiniLM of its own. The model is called in the summary lane, after the chunks of the messages it
    reads are committed (bench/RESULTS.md, "Remember latency"). Raises OpenAIMissingError when openai is chosen
    but missing."""
    choice = settings.instruction_detector
    if choice == "openai" or (choice == "auto" and settings.resolved_summariser == "openai"):
        return OpenAIDetector(settings)
    if choice == "pattern":
        return PatternDetector()
    from services.embedding import LOCAL_DIMENSION, LOCAL_MODEL, LocalEmbedder
    from services.instruction_classifier import ClassifierDetector  # imports this module

    if embedder is None or embedder.model_name != LOCAL_MODEL or embedder.dimension != LOCAL_DIMENSION:
        embedder = LocalEmbedder(threads=1)
    return ClassifierDetector(embedder)


# --- supersession --------------------------------------------------------------------------------------------------

# Cosines of MiniLM (the local embedder) between two statements of one speaker; measured on the labelled pairs of
# tests/services/test_instructions.py (SUBJECT_PAIRS), see the comment there for how they were chosen.
SAME_TEXT_COSINE = 0.74
"""Two statements at least this close are on the same subject, whatever their subject keys."""
SAME_KEY_COSINE = 0.55
"""Two statements with equal non-empty subject keys need only be this close."""
CORRECTION_COSINE = 0.4
"""... and this close when the later one says it corrects (`rules.corrects`: actually, again, instead, back to)."""


class Superseder:
    """Decides which instructions a later statement on the same subject replaces (newest wins).

    embedder: the project's Embedder (services/embedding.py: `embed(texts) -> float32 (n, d)`, L2-normalised),
    used on each instruction's statement (else its text). Two instructions are on the same subject when they
    have the same speaker (case-insensitive) and
      - their statements' cosine is at least `text_cosine`, or
      - their subject keys are equal and non-empty and the cosine is at least `key_cosine` (CORRECTION_COSINE
        when the later one says it corrects: "Actually, answer in English again."), or
      - both subjects were named by an LLM detector (`openai:*`) and are equal (those subjects are abstract:
        "css framework" for both Bootstrap and Tailwind, which MiniLM cannot tell apart from unrelated names).
    A revocation (`rules.revocation_topic`: "Forget what I said about French.", "I'm no longer vegetarian.")
    is on the subject of every earlier statement that holds all the stems of its topic, or at least
    `key_cosine` close; it is itself no rule, so once settled it points at itself (out of force).
    Raises EmbeddingError when the embedder fails.
    """

    def __init__(
        self, embedder: Embedder, *, text_cosine: float = SAME_TEXT_COSINE, key_cosine: float = SAME_KEY_COSINE
    ) -> None:
        self._embedder = embedder
        self.text_cosine = text_cosine
        self.key_cosine = key_cosine

    def similarity(self, a: Instruction, b: Instruction) -> float:
        """Cosine (-1..1) of the two instructions' statements."""
        va, vb = self._embedder.embed([said(a), said(b)])
        return float(va @ vb)

    def same_subject(self, a: Instruction, b: Instruction) -> bool:
        """Whether b, said after a, is on a's subject (see the class docstring)."""
        return self._same(a, b, self.similarity(a, b))

    def _same(self, a: Instruction, b: Instruction, cosine: float) -> bool:
        if a.speaker.strip().casefold() != b.speaker.strip().casefold():
            return False
        topic = rules.revocation_topic(said(b))
        if topic is not None:  # a revocation withdraws what is about its topic
            stems = rules.topic_stems(topic)
            return bool(stems) and stems <= rules.topic_stems(said(a)) or cosine >= self.key_cosine
        if cosine >= self.text_cosine:
            return True
        if a.subject and a.subject == b.subject:
            if a.detector.startswith("openai:") and b.detector.startswith("openai:"):
                return True
            if rules.corrects(said(b)):  # "Actually, answer in English again." says it changes an earlier rule
                return cosine >= CORRECTION_COSINE
            return cosine >= self.key_cosine
        return False

    def supersede(
        self, existing: Sequence[Instruction], new: Sequence[Instruction], vectors: np.ndarray | None = None
    ) -> list[Instruction]:
        """Every instruction of existing then new (copies, same order) with `superseded_by` set where a later one
        on the same subject replaced it.

        Order is the lists' order: each list oldest first, every new one later than every existing one. Only
        instructions still in force (superseded_by null) are replaced; each points at its direct successor, the
        first later one on its subject. An existing one keeps its superseded_by. Inputs are not modified.
        vectors: the statements' embeddings (float32, (len(existing) + len(new), d), L2-normalised, in that
        order) when the caller has them stored; else they are embedded here."""
        items = [i.model_copy() for i in (*existing, *new)]
        if not new:
            return items
        if vectors is None:
            vectors = self._embedder.embed([said(i) for i in items])
        elif len(vectors) != len(items):
            raise ValueError(f"{len(vectors)} vectors for {len(items)} instructions")
        cosines = np.asarray(vectors @ vectors.T, dtype=np.float32)
        first_new = len(existing)
        for j in range(first_new, len(items)):
            for i in range(j):
                if (
                    items[i].superseded_by is None
                    and items[i].id != items[j].id
                    and self._same(items[i], items[j], float(cosines[i, j]))
                ):
                    items[i].superseded_by = items[j].id
        return _revoked(items, {i.id for i in items[first_new:]})

    def settle(self, items: Sequence[Instruction], vectors: np.ndarray, fresh: Collection[str]) -> list[Instruction]:
        """`supersede([], items, vectors)` (items oldest first, all in force; vectors float32 (len(items), d),
        L2-normalised, in that order) comparing only the pairs that hold a `fresh` instruction (a new one, or one
        just back in force): every other pair was compared when the later of the two was stored. Copies; the
        inputs are not modified. len(items) * len(fresh) comparisons instead of len(items) squared, so a
        namespace with thousands of instructions settles a step's few new ones at once."""
        items = [i.model_copy() for i in items]
        if len(vectors) != len(items):
            raise ValueError(f"{len(vectors)} vectors for {len(items)} instructions")
        marked = [k for k, i in enumerate(items) if i.id in fresh]
        if not marked:
            return items
        cosines = np.asarray(vectors @ vectors[marked].T, dtype=np.float32)  # (len(items), len(marked))
        column = {k: c for c, k in enumerate(marked)}
        pairs = sorted(
            {(min(a, k), max(a, k)) for k in marked for a in range(len(items)) if a != k},
            key=lambda pair: (pair[1], pair[0]),
        )  # as `supersede` walks them: later one, then earlier
        for i, j in pairs:
            cosine = cosines[i, column[j]] if j in column else cosines[j, column[i]]
            if (
                items[i].superseded_by is None
                and items[i].id != items[j].id
                and self._same(items[i], items[j], float(cosine))
            ):
                items[i].superseded_by = items[j].id
        return _revoked(items, set(fresh))


def _revoked(items: list[Instruction], fresh: set[str]) -> list[Instruction]:
    """items with each fresh revocation ("Forget what I said about French.") out of force: it superseded what it
    withdraws and is no rule of its own, so it points at itself (`superseded_by` = its own id)."""
    for i in items:
        if i.id in fresh and i.superseded_by is None and rules.revocation_topic(said(i)) is not None:
            i.superseded_by = i.id
    return items


def said(instruction: Instruction) -> str:
    """What an instruction's embedding is of: its statement, else its sentence."""
    return instruction.statement or instruction.text


_EPOCH = datetime.min.replace(tzinfo=UTC)


def said_order(instruction: Instruction) -> tuple[datetime, datetime, str]:
    """Sort key, oldest first: when it was said (the message's time, else when it was stored), then when it was
    stored (sentences of one message, messages without times), then the id."""
    recorded = instruction.recorded_at or _EPOCH
    return instruction.created_at or recorded, recorded, instruction.id


def after_removal(entries: Sequence[Instruction], removed: set[str]) -> dict[str, str | None]:
    """{id: its new superseded_by} for the kept entries whose successor is being removed (forgotten with its
    message, or deleted): each now points at the first kept one along its chain of successors, or at none (in
    force again) when the chain ends in removed ones. `entries`: every stored instruction of the namespace,
    superseded ones too."""
    successor = {i.id: i.superseded_by for i in entries}
    out: dict[str, str | None] = {}
    for i in entries:
        if i.id in removed or i.superseded_by not in removed:
            continue
        nxt: str | None = i.superseded_by
        seen: set[str] = set()
        while nxt is not None and nxt in removed and nxt not in seen:  # `seen`: a stored cycle cannot loop
            seen.add(nxt)
            nxt = successor.get(nxt)
        out[i.id] = None if nxt in removed or nxt == i.id else nxt
    return out


def supersede(existing: Sequence[Instruction], new: Sequence[Instruction], embedder: Embedder) -> list[Instruction]:
    """`Superseder(embedder).supersede(existing, new)` with the measured thresholds."""
    return Superseder(embedder).supersede(existing, new)
