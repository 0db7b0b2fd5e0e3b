"""Standing instructions and preferences: the pattern detector's precision and recall, speakers, sentences and
offsets, the OpenAI detector against a loopback server in OpenAI's wire format, and supersession with the real
local embedder."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from loopback.openai_server import LoopbackOpenAI
from models.api import Message
from models.instructions import Detected, Instruction
from services.embedding import LocalEmbedder
from services.instruction_classifier import ClassifierDetector, reacts_or_hedges, standing_request
from services.instruction_rules import not_own_rule, subject_key
from services.instructions import (
    SAME_KEY_COSINE,
    SAME_TEXT_COSINE,
    OpenAIDetector,
    PatternDetector,
    Superseder,
    after_removal,
    make_detector,
    said,
    said_order,
    supersede,
)
from tests.support.embedders import RecordingEmbedder
from tests.support.settings import make_settings

DETECTOR = PatternDetector()


def detect(content: str, speaker: str = "user") -> list[Detected]:
    return DETECTOR.detect([Message(id="m1", speaker=speaker, content=content)], conversation_id="c1")


# --- recall: every accepted form ----------------------------------------------------------------------------------

ACCEPTED = [
    ("Always format code with syntax highlighting.", "instruction"),
    ("Never use external libraries.", "instruction"),
    ("I prefer Bootstrap over Foundation.", "preference"),
    ("from now on answer in French", "instruction"),
    ("I'm trying to keep the bundle under 100KB.", "preference"),
    ("Always include version numbers when I ask about libraries.", "instruction"),
    ("Please keep your answers short.", "instruction"),
    ("I'd rather you didn't use emojis.", "preference"),
    ("Call me Sam.", "instruction"),
    ("Going forward, use British spelling.", "instruction"),
    ("Whenever I ask about SQL, include the query plan.", "instruction"),
    ("Make sure to always cite your sources.", "instruction"),
    ("Please don't ever use emojis.", "instruction"),
    ("Remember to use metric units.", "instruction"),
    ("Don't use external libraries unless I ask for them.", "instruction"),
    ("I like my answers to be short and direct.", "preference"),
    ("I want all code examples to use TypeScript.", "preference"),
    ("My preference is tabs over spaces.", "preference"),
    ("OK, from now on, please answer in French.", "instruction"),
    ("When I ask for a recipe, always list the ingredients first.", "instruction"),
    ("Could you answer in French from now on?", "instruction"),
    ("Stop using emojis.", "instruction"),
    ("I prefer it when you use bullet points.", "preference"),
    ("I hate it when you apologise.", "preference"),
    ("My favourite editor is Vim.", "preference"),
    ("I usually go with PostgreSQL for new projects.", "preference"),
    ("Remember that I'm vegetarian.", "instruction"),
    ("Answer in French from now on.", "instruction"),
    ("I want you to always double-check the math.", "instruction"),
    ("In the future, please include a summary at the end.", "instruction"),
    ("I don't want you to use jQuery.", "preference"),
    ("Use metric units in all your answers.", "instruction"),
    ("Every time I paste code, explain it line by line.", "instruction"),
    ("I'd rather not talk about my old job.", "preference"),
    ("Feel free to use external libraries from now on.", "instruction"),
    ("I'm trying to set up a project with Bootstrap and I prefer it over Foundation for its docs.", "preference"),
    ("Also, I prefer short answers with one code example.", "preference"),
]


@pytest.mark.parametrize("content,kind", ACCEPTED)
def test_each_accepted_form_is_found(content: str, kind: str) -> None:
    found = detect(content)
    assert len(found) == 1, content
    d = found[0]
    assert d.kind == kind and d.text == content.strip() and d.detector == "pattern" and d.rule
    assert (d.message_id, d.conversation_id, d.speaker, d.start, d.end) == ("m1", "c1", "user", 0, len(content))


# --- precision: what is never an instruction -----------------------------------------------------------------------

REJECTED = [
    # questions
    "Should I always use TypeScript?",
    "Do you always answer in English?",
    "Do you think I should always pin dependencies?",
    "Can you always tell if an image was AI-generated?",
    "why do I always forget my keys",
    # hypotheticals and conditions about the past or other people
    "If I always used tabs, would it matter?",
    "What if I never use semicolons?",
    "Suppose I prefer Vue, what then?",
    "When I was young, I always preferred chocolate.",
    "If it were up to me, I'd rather use Vue.",
    # quoted or reported text
    "My boss said 'always use tabs'.",
    "My boss said \u201calways use tabs\u201d.",
    "> Always use tabs",
    "Use `always_use_tabs = True` in the config.",
    "```\n# Always use tabs\nnever_use_spaces()\n```",
    "My boss said always use tabs.",
    "He told me to never use jQuery.",
    'The docs say "always use prepared statements".',
    # statements about others
    "My friend prefers Vue.",
    "My manager prefers Jira, but I think Trello is easier.",
    "My friend always says to never trust user input.",
    # one-off requests for the current answer
    "Can you write this in French?",
    "Write me a poem.",
    "Make the answer shorter.",
    "Add comments to all functions.",
    "Please respond in English this time.",
    "Can you keep it under 200 words this time?",
    "I'd prefer Python for this.",
    "I prefer the second one.",
    "Okay, let's go with your first suggestion.",
    "I'd like the answer in a table, please.",
    "Let me know if you need more details.",
    "I need some suggestions that are fun for kids and adults alike.",
    "I want more examples.",
    # past-tense narration
    "I always used to play guitar.",
    "I never thought it would be this hard.",
    "When I was a student, I always preferred night shifts.",
    # feelings and sayings
    "I never know what to do.",
    "Never mind.",
    "Always a pleasure!",
    "Never give up!",
    "I prefer not to say.",
    "You always explain things so clearly!",
    # the speaker keeps what the other said: a promise to remember, no fact of their own
    "I'll definitely keep that in mind.",
    "Thanks, we will keep that in mind for next time.",
]


@pytest.mark.parametrize("content", REJECTED)
def test_each_rejected_case_finds_nothing(content: str) -> None:
    assert detect(content) == [], content


# A realistic conversation of one user with a coding assistant: nothing in it is a standing instruction.
ORDINARY_CHAT = """hey, I'm setting up a new Flask app and the login page keeps throwing a 500
It always crashes when I open the settings page.
I always forget to activate the virtualenv before running it, haha.
I never know which regex flags to use.
Can you show me how to do that in Python?
Thanks, that worked!
What's the difference between let and const?
Never mind, I figured it out.
Make it shorter.
Could you explain that again, but simpler?
I used to work at a bank, so security matters to me.
From what I've read, you should always use bcrypt for passwords.
Always a pleasure chatting with you.
I want to finish this by Friday.
I need to keep going, the deadline is close.
I'm trying to understand how async works in Python.
Write me a short poem about the sea.
Please translate this paragraph into Spanish.
I keep getting the same error every time I run the tests.
Whenever I run the script, it hangs for a minute.
I prefer to think of it as a feature, not a bug.
Honestly I never thought it would be this hard.
I'd love a recipe for banana bread.
I'm not sure I like the new design.
Use the same approach as before.
Add error handling to that function, please.
I'll try that tomorrow and let you know.
Remember when we talked about the cache bug?
Ugh, my code never works on the first try.
I want to keep it simple for now.
My boss said we should never deploy on Fridays.
He told me to always write tests first.
ok so the migration ran but the users table is empty?? any idea why
I think the issue is the session cookie, it never gets set on Safari.
Sounds good. I'll deploy it tonight and check the logs in the morning."""


def test_an_ordinary_conversation_holds_no_instruction() -> None:
    messages = [Message(id=str(i), speaker="user", content=line) for i, line in enumerate(ORDINARY_CHAT.splitlines())]
    assert DETECTOR.detect(messages) == []
    whole = Message(id="all", speaker="user", content=ORDINARY_CHAT.replace("\n", " "))
    assert DETECTOR.detect([whole]) == []


# --- speakers -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("speaker", ["assistant", "Assistant", "system", "SYSTEM", "tool", "bot", "AI", "ai"])
def test_only_human_speakers_state_instructions(speaker: str) -> None:
    assert detect("Always back up your data.", speaker=speaker) == []
    assert detect("Always include version numbers when I ask about libraries.", speaker=speaker) == []


@pytest.mark.parametrize("speaker", ["user", "Caroline", "Melanie"])
def test_any_other_speaker_name_counts(speaker: str) -> None:
    [d] = detect("I prefer tea over coffee.", speaker=speaker)
    assert d.speaker == speaker and d.kind == "preference"


def test_a_role_without_a_speaker_is_the_speaker() -> None:
    messages = [
        Message(role="assistant", content="Always back up your data."),
        Message(role="user", content="Never use emojis.", created_at=datetime(2026, 5, 1, tzinfo=UTC)),
    ]
    [d] = DETECTOR.detect(messages)
    assert d.speaker == "user" and d.message_id is None and d.created_at == datetime(2026, 5, 1, tzinfo=UTC)


# --- sentences, offsets, code, unicode, long messages --------------------------------------------------------------


def test_only_the_instruction_sentence_is_returned_with_its_offsets() -> None:
    content = (
        "Thanks for the help with the parser yesterday! It works now. "
        "From now on, please answer in French.  Can you also look at the lexer?"
    )
    [d] = detect(content)
    assert d.text == "From now on, please answer in French."
    assert content[d.start : d.end] == d.text and d.start == content.index("From now on")
    assert d.statement == d.text and d.subject == "answer" and d.rule == "standing-lead"


def test_each_instruction_sentence_of_a_message_is_returned_in_order() -> None:
    content = "Hi!\nAlways use tabs. I like pizza.\n\nAlso, never use emojis in your answers."
    found = detect(content)
    assert [d.text for d in found] == ["Always use tabs.", "Also, never use emojis in your answers."]
    assert all(content[d.start : d.end] == d.text for d in found)


def test_the_statement_is_the_clause_of_a_long_sentence() -> None:
    content = (
        "I'm working on a budget tracker, so I prefer simple, minimal dependencies, how can I make sure "
        "the app stays small?"
    )
    [d] = detect(content)
    assert d.text == content and d.statement == "I prefer simple, minimal dependencies"
    assert d.kind == "preference" and d.subject == "simpl minim depend"


def test_a_condition_stays_part_of_the_statement() -> None:
    [d] = detect("Whenever I ask about SQL, include the query plan.")
    assert d.statement == "Whenever I ask about SQL, include the query plan."


def test_code_blocks_and_quotes_are_skipped_but_the_speakers_own_words_count() -> None:
    content = (
        "Here is my config:\n```python\n# Always use tabs\nNEVER_USE = 'spaces'\n```\n"
        '> Never use emojis\nMy lead wrote "always squash commits". I prefer rebasing over merging.'
    )
    [d] = detect(content)
    assert d.text == "I prefer rebasing over merging." and content[d.start : d.end] == d.text


def test_unicode_text_and_curly_apostrophes() -> None:
    content = "Merci ! 🎉 Ça marche. I\u2019d rather you didn\u2019t use emojis 😅. 日本語の説明もありがとう。"
    [d] = detect(content)
    assert d.text == "I\u2019d rather you didn\u2019t use emojis 😅." and content[d.start : d.end] == d.text
    assert d.kind == "preference" and d.subject == "us emoji"  # Porter stems (services/text.stem)
    [d] = detect("Always answer in Portugu\u00eas, por favor.")
    assert d.kind == "instruction"


def test_a_long_message_is_read_in_linear_time() -> None:
    filler = "This is an ordinary sentence about the deployment pipeline and its logs. " * 400
    content = filler + "Never deploy on Fridays without asking me first. " + filler
    started = time.perf_counter()
    [d] = detect(content)
    assert time.perf_counter() - started < 2.0
    assert d.text == "Never deploy on Fridays without asking me first." and content[d.start : d.end] == d.text
    # no sentence breaks at all, and an unclosed code fence
    assert detect("word " * 6000) == [] and detect("```\n" + "Always use tabs.\n" * 500) == []


def test_subject_keys_drop_the_varying_value() -> None:
    assert subject_key("From now on answer in French") == subject_key("From now on answer in English") == "answer"
    assert subject_key("Call me Sam") == subject_key("Please call me Samantha") == "call"
    assert subject_key("Always use emojis") == subject_key("Never use emojis") == "us emoji"
    assert subject_key("I'm trying to keep the bundle under 100KB") == "keep bundl"
    assert subject_key("I prefer Bootstrap over Foundation") == ""


# --- supersession ----------------------------------------------------------------------------------------------------

# Labelled pairs (earlier, later, same subject?) for the supersession rule. How the thresholds were chosen: with
# the local MiniLM, the cosine of the two statements of the 18 different-subject pairs below reaches at most 0.72
# ("exact times" / "time zones" for meetings); same-subject pairs run from 0.30 to 0.96. SAME_TEXT_COSINE = 0.74
# sits between that 0.72 and the next same-subject pair (0.755), so no different-subject pair is merged by
# cosine alone. Among pairs whose subject keys are equal, the different-subject one ("answer in French" /
# "answer in Markdown") is at 0.37 and the same-subject ones start at 0.66 ("Never use external libraries" /
# "Feel free to use external libraries"), so SAME_KEY_COSINE = 0.55 sits between them. Result on this set: 13
# of 18 updates found, 0 of 18 unrelated pairs merged. The 5 misses (marked) need knowledge MiniLM lacks (that
# Tailwind and Bootstrap are both CSS frameworks, cosine 0.30) or see two wordings of one subject with
# different words (tabs/spaces 0.67, TypeScript/JavaScript 0.64, short/long answers 0.54): precision first, a
# wrongly superseded instruction would vanish from the context, a missed update only shows both.
SUBJECT_PAIRS = [
    ("From now on answer in French.", "From now on answer in English.", True),
    ("Call me Sam.", "Please call me Samantha.", True),
    ("Always use emojis.", "Never use emojis.", True),
    ("I'm trying to keep the bundle under 100KB.", "I'm trying to keep the bundle under 150KB.", True),
    ("Always give temperatures in Celsius.", "Always give temperatures in Fahrenheit.", True),
    ("Always format dates as day/month/year.", "Always format dates as ISO 8601.", True),
    ("I prefer PostgreSQL for new projects.", "I prefer MySQL for new projects.", True),
    ("Never use external libraries.", "Feel free to use external libraries from now on.", True),
    ("I prefer light mode.", "I prefer dark mode.", True),
    ("Always cite sources with APA style.", "Always cite sources in MLA style.", True),
    (
        "Always include version numbers when I ask about libraries.",
        "Don't include version numbers when I ask about libraries unless I ask for them.",
        True,
    ),
    ("My favourite editor is Vim.", "My favourite editor is Emacs now.", True),
    ("I'd rather you didn't use emojis.", "Please don't ever use emojis.", True),
    # known misses (see above)
    ("I prefer Bootstrap over Foundation.", "Actually I prefer Tailwind for CSS.", None),
    ("Please keep your answers short.", "I like my answers long and detailed.", None),
    ("Please keep your answers short.", "Keep your answers under 100 words.", None),
    ("I prefer tabs over spaces.", "Actually, I prefer spaces for indentation.", None),
    ("Always use TypeScript for examples.", "From now on write examples in plain JavaScript.", None),
    # different subjects: both stay in force
    ("Always include version numbers when I ask about libraries.", "Never use emojis.", False),
    ("Always answer in French.", "Always answer in Markdown.", False),
    (
        "Always include version numbers when I ask about libraries.",
        "Always include license information when I ask about libraries.",
        False,
    ),
    ("I prefer Python for scripts.", "I prefer tea over coffee.", False),
    ("Always format code with syntax highlighting.", "Always include comments in code.", False),
    ("Please keep your answers short.", "Always include version numbers.", False),
    ("Never use external libraries.", "Always include version numbers when I ask about libraries.", False),
    ("I prefer detailed proofs with diagrams.", "I prefer step-by-step explanations with concrete examples.", False),
    ("Call me Sam.", "Always answer in French.", False),
    (
        "Always provide exact times when I ask about meetings.",
        "Always confirm time zones when I ask about meeting times.",
        False,
    ),
    (
        "Always include specific dates when I ask about events.",
        "Always include attendance numbers when I ask about events.",
        False,
    ),
    ("I'm trying to keep the bundle under 100KB.", "I'm trying to keep page load under 2 seconds.", False),
    ("Always use bullet points for lists.", "Always use tables for comparisons.", False),
    ("Always give temperatures in Celsius.", "Always give distances in kilometres.", False),
    ("I prefer PostgreSQL for new projects.", "I prefer Vue for the frontend.", False),
    ("Remember that I'm vegetarian.", "Remember that I'm allergic to peanuts.", False),
    ("I prefer writing in the mornings.", "I prefer editing in short bursts.", False),
    ("Always use British spelling.", "Always use metric units.", False),
]


def instruction(
    id: str,
    content: str,
    speaker: str = "user",
    detector: str = "pattern",  # noqa: A002
    subject: str | None = None,
) -> Instruction:
    [d] = detect(content, speaker=speaker)
    inst = d.to_instruction(id)
    return inst.model_copy(update={"detector": detector, "subject": inst.subject if subject is None else subject})


@pytest.fixture(scope="module")
def superseder(embedder: LocalEmbedder) -> Superseder:
    return Superseder(embedder)


def test_the_thresholds_hold_on_the_labelled_pairs(superseder: Superseder) -> None:
    assert (SAME_TEXT_COSINE, SAME_KEY_COSINE) == (0.74, 0.55)
    wrong = []
    for earlier, later, same in SUBJECT_PAIRS:
        a, b = instruction("a", earlier), instruction("b", later)
        judged = superseder.same_subject(a, b)
        if judged != (same is not False):
            wrong.append((earlier, later, round(superseder.similarity(a, b), 3)))
    misses = [(e, lt) for e, lt, same in SUBJECT_PAIRS if same is None]
    assert [(e, lt) for e, lt, _ in wrong] == misses


@pytest.mark.parametrize("earlier,later,same", [p for p in SUBJECT_PAIRS if p[2] is not None])
def test_supersession_in_both_directions(superseder: Superseder, earlier: str, later: str, same: bool) -> None:
    """Whichever is said last wins; unrelated ones both stay in force, in either order."""
    for first, second in ((earlier, later), (later, earlier)):
        old, new = instruction("old", first), instruction("new", second)
        out = superseder.supersede([old], [new])
        assert [i.id for i in out] == ["old", "new"] and out[1].superseded_by is None
        assert out[0].superseded_by == ("new" if same else None), (first, second)


def test_french_then_english(embedder: LocalEmbedder) -> None:
    french = instruction("i1", "From now on answer in French.")
    tabs = instruction("i2", "Always use tabs.")
    english = instruction("i3", "From now on answer in English.")
    out = supersede([french, tabs], [english], embedder)
    assert [(i.id, i.superseded_by) for i in out] == [("i1", "i3"), ("i2", None), ("i3", None)]
    assert french.superseded_by is None  # inputs are not modified


def test_a_chain_of_updates_and_new_ones_among_themselves(superseder: Superseder) -> None:
    a = instruction("a", "From now on answer in French.")
    b = instruction("b", "From now on answer in English.")
    c = instruction("c", "From now on answer in German.")
    out = superseder.supersede([a], [b, c])
    assert [(i.id, i.superseded_by) for i in out] == [("a", "b"), ("b", "c"), ("c", None)]
    # an instruction already replaced keeps its successor; only the one in force is replaced again
    out = superseder.supersede(out, [instruction("d", "From now on answer in Italian.")])
    assert [(i.id, i.superseded_by) for i in out] == [("a", "b"), ("b", "c"), ("c", "d"), ("d", None)]
    assert superseder.supersede(out, []) == out


def test_different_speakers_never_supersede_each_other(superseder: Superseder) -> None:
    ann = instruction("a", "From now on answer in French.", speaker="Ann")
    bob = instruction("b", "From now on answer in English.", speaker="Bob")
    out = superseder.supersede([ann], [bob])
    assert [i.superseded_by for i in out] == [None, None]
    ann_again = instruction("c", "From now on answer in English.", speaker="ann")
    assert superseder.supersede([ann], [ann_again])[0].superseded_by == "c"


def test_equal_subjects_named_by_an_llm_are_one_subject(superseder: Superseder) -> None:
    """MiniLM puts Bootstrap and Tailwind far apart; an LLM detector's abstract subject joins them."""
    boot = instruction("a", "I prefer Bootstrap over Foundation.", detector="openai:m", subject="css framework")
    tail = instruction("b", "Actually I prefer Tailwind for CSS.", detector="openai:m", subject="css framework")
    assert superseder.supersede([boot], [tail])[0].superseded_by == "b"
    boot, tail = (
        instruction("a", "I prefer Bootstrap over Foundation."),
        instruction("b", "Actually I prefer Tailwind for CSS."),
    )
    assert superseder.supersede([boot], [tail])[0].superseded_by is None


# --- the OpenAI detector against a loopback server -------------------------------------------------------------------

CHAT = [
    Message(id="u1", speaker="user", content="Hi! From now on answer in French. Can you help with my CV?"),
    Message(id="a1", speaker="assistant", content="Bien sûr ! Always back up your data."),
    Message(id="u2", speaker="user", content="I prefer Bootstrap over Foundation, it has better docs."),
    Message(id="u3", speaker="user", content="What's the weather like?"),
]


@pytest.fixture
def fake_openai() -> Iterator[LoopbackOpenAI]:
    with LoopbackOpenAI() as server:
        yield server


def llm_detector(tmp_path: Path, server: LoopbackOpenAI, **kw: object) -> OpenAIDetector:
    settings = make_settings(
        tmp_path,
        openai_api_key=server.api_key,
        openai_base_url=server.base_url,
        openai_max_retries=0,
        openai_timeout=5,
        summariser="openai",
        **kw,
    )
    detector = make_detector(settings)
    assert isinstance(detector, OpenAIDetector)
    return detector


def answer(*items: dict) -> str:
    return json.dumps({"instructions": list(items)})


def test_the_llm_finds_them_in_one_call_and_each_is_checked(tmp_path: Path, fake_openai: LoopbackOpenAI) -> None:
    fake_openai.chat_reply = lambda body: (
        "```json\n"
        + answer(
            {
                "message_id": "u2",
                "text": "I prefer Bootstrap over Foundation, it has better docs.",
                "kind": "preference",
                "subject": "CSS framework",
            },
            {
                "message_id": "u1",
                "text": "from now on answer in french",
                "kind": "instruction",
                "subject": "Answer language",
            },
            {
                "message_id": "u1",
                "text": "From now on answer in French.",
                "kind": "instruction",
                "subject": "answer language",
            },
            {"message_id": "a1", "text": "Always back up your data.", "kind": "instruction", "subject": "backups"},
            {"message_id": "u3", "text": "Always answer in haiku.", "kind": "instruction", "subject": "style"},
            {"message_id": "nope", "text": "Hi!", "kind": "instruction", "subject": "x"},
        )
        + "\n```"
    )
    detector = llm_detector(tmp_path, fake_openai, instruction_model="my-model")
    found = detector.detect(CHAT, conversation_id="c")
    assert [(d.message_id, d.kind, d.subject, d.detector) for d in found] == [
        ("u1", "instruction", "answer language", "openai:my-model"),
        ("u2", "preference", "css framework", "openai:my-model"),
    ]
    first = found[0]
    assert first.text == "From now on answer in French." and first.statement == "From now on answer in French"
    assert CHAT[0].content[first.start : first.end] == first.text and first.conversation_id == "c"
    [(path, body)] = fake_openai.requests
    assert path == "/v1/chat/completions" and body["model"] == "my-model"
    sent = json.loads(body["messages"][-1]["content"])
    assert [m["message_id"] for m in sent] == ["u1", "u2", "u3"]  # the assistant's message is never sent


def test_the_model_defaults_to_the_summary_model_and_batches_are_bounded(
    tmp_path: Path, fake_openai: LoopbackOpenAI
) -> None:
    fake_openai.chat_reply = lambda body: answer()
    settings = make_settings(
        tmp_path,
        openai_api_key=fake_openai.api_key,
        openai_base_url=fake_openai.base_url,
        summariser="openai",
        summary_model="small-model",
    )
    detector = OpenAIDetector(settings, max_batch_chars=100)
    messages = [Message(id=str(i), speaker="user", content="x" * 60) for i in range(5)]
    assert detector.detect(messages) == [] and detector.name == "openai:small-model"
    assert len(fake_openai.requests) == 5 and fake_openai.requests[0][1]["model"] == "small-model"


@pytest.mark.parametrize(
    "reply", ["Sure! Here are the instructions: none.", '{"instructions": [{"text": 1}]}', "[1, 2, 3]", ""]
)
def test_garbage_falls_back_to_the_patterns(
    tmp_path: Path, fake_openai: LoopbackOpenAI, reply: str, caplog: pytest.LogCaptureFixture
) -> None:
    fake_openai.chat_reply = lambda body: reply
    with caplog.at_level(logging.WARNING, logger="services.instructions"):
        found = llm_detector(tmp_path, fake_openai).detect(CHAT)
    assert found == DETECTOR.detect(CHAT) and [d.detector for d in found] == ["pattern", "pattern"]
    assert "using the pattern detector" in caplog.text


def test_server_errors_fall_back_to_the_patterns(
    tmp_path: Path, fake_openai: LoopbackOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    fake_openai.fail_next = 10
    with caplog.at_level(logging.WARNING, logger="services.instructions"):
        found = llm_detector(tmp_path, fake_openai).detect(CHAT)
    assert [d.statement for d in found] == ["From now on answer in French.", "I prefer Bootstrap over Foundation"]
    assert "InternalServerError" in caplog.text and fake_openai.requests


def test_the_offline_default_is_the_rules_plus_the_classifier(tmp_path: Path) -> None:
    """The classifier finds the standing rules the rules' patterns miss (bench/RESULTS.md: test-set recall 0.80
    against 0.19); INSTRUCTION_DETECTOR=pattern keeps the rules alone."""
    assert isinstance(make_detector(make_settings(tmp_path)), ClassifierDetector)
    assert isinstance(
        make_detector(make_settings(tmp_path, summariser="extractive", openai_api_key="sk")), ClassifierDetector
    )
    assert isinstance(make_detector(make_settings(tmp_path, instruction_detector="pattern")), PatternDetector)
    assert isinstance(make_detector(make_settings(tmp_path, instruction_detector="classifier")), ClassifierDetector)


def test_the_classifier_finds_plain_rules_and_leaves_small_talk(tmp_path: Path) -> None:
    """Plain imperatives and facts to keep that no pattern covers are found; thanks, plans, one-off requests,
    questions, markdown lines and what one person tells another are not."""
    detector = make_detector(make_settings(tmp_path))
    said = [
        "Give temperatures in Celsius.",
        "I'm lactose intolerant.",
        "Thanks for the detailed guidance!",
        "I'll definitely ask Laura those questions.",
        "Write me a poem about the sea.",
        "Should I always use TypeScript?",
        "- **2:00 PM:** team meeting",
    ]
    found = detector.detect([Message(id=str(i), role="user", content=t) for i, t in enumerate(said)])
    assert {(d.message_id, d.kind) for d in found} == {("0", "instruction"), ("1", "preference")}
    people = [
        Message(id="1", speaker="Gina", content="Use sunscreen every day."),
        Message(id="2", speaker="Jon", content="Ok."),
    ]
    assert detector.detect(people, user="Gina") == []


def test_in_a_chat_between_people_only_the_users_sentences_are_embedded() -> None:
    """The classifier's embeddings are the cost of detection (one per sentence): in a chat between people only the
    `user`'s preferences are kept, so nobody else's sentence is embedded, and none when no `user` is set. The
    user's preference is found as before; a chat with an assistant embeds its person's sentences."""
    embedder = RecordingEmbedder()
    detector = ClassifierDetector(embedder)
    people = [
        Message(id="1", speaker="Gina", content="Use sunscreen every day. I'm lactose intolerant."),
        Message(id="2", speaker="Jon", content="I'm allergic to peanuts. Great to hear from you."),
    ]
    assert detector.detect(people) == [] and embedder.texts == []
    found = detector.detect(people, user="Jon")
    assert [(d.message_id, d.kind) for d in found] == [("2", "preference")]
    assert embedder.texts == ["I'm allergic to peanuts.", "Great to hear from you."]
    embedder.texts.clear()
    detector.detect([Message(id="3", role="user", content="Give temperatures in Celsius.")])
    assert embedder.texts == ["Give temperatures in Celsius."]


def test_a_reply_that_approves_a_suggestion_is_no_preference(tmp_path: Path) -> None:
    """A verdict on what the assistant just proposed names the proposal's topic, so MiniLM puts it next to the
    user's real preference on it; kept, it would replace that preference (newest wins). A preference said with
    the same verbs ("... work best for me") is still one."""
    detector = make_detector(make_settings(tmp_path))
    chat = [
        Message(id="1", role="user", content="I prefer audiobooks for my commute."),
        Message(id="2", role="assistant", content="Then try a narrated history, or a podcast series."),
        Message(id="3", role="user", content="Yeah, audiobooks sound perfect for me."),
        Message(id="4", role="user", content="Okay, the history one looks great."),
        Message(id="5", role="user", content="I might try the podcast at the weekend."),
    ]
    assert [(d.message_id, d.kind) for d in detector.detect(chat)] == [("1", "preference")]
    assert reacts_or_hedges("Yeah, e-books sound perfect for me.") and reacts_or_hedges("That works for me.")
    assert reacts_or_hedges("I might switch formats depending on my mood.") and reacts_or_hedges("Sounds good!")
    assert not reacts_or_hedges("Short chapters work best for me.")
    assert not reacts_or_hedges("Tabs look better to me.")


def test_a_sentence_ending_in_a_verdict_or_a_tried_plan_is_no_statement(tmp_path: Path) -> None:
    """A sentence that ends by judging an option ("..., the second policy seems pretty reasonable.") or plans
    with a hedge ("I'll also try to ...") answers what was proposed: the shipped classifier kept both forms (an
    `instruction` and a `preference` in a BEAM chat, where they took the block's room). A rule that ends in a
    judgement of the user's own is still kept."""
    detector = make_detector(make_settings(tmp_path))
    chat = [
        Message(id="1", role="user", content="Always give me prices in euros."),
        Message(id="2", role="assistant", content="Here are three quotes for home insurance."),
        Message(
            id="3",
            role="user",
            content="Based on the quotes I got, the $900 policy from Harbour seems pretty reasonable.",
        ),
        Message(
            id="4", role="user", content="I'll also try to keep a consistent bedtime and less screen time at night."
        ),
    ]
    assert [(d.message_id, d.kind) for d in detector.detect(chat)] == [("1", "instruction")]
    assert reacts_or_hedges("Okay, the second plan looks good.") and reacts_or_hedges("I'll try to walk more.")
    assert not reacts_or_hedges("I'll always want the metric units, they look fine to me in tables.")


def test_a_plan_an_expectation_or_a_choice_of_the_users_own_is_no_rule(tmp_path: Path) -> None:
    """The user's next step ("Then, I'll ..."), what they expect of something ("I think the hardest part will be ...",
    "... should help me ..."), and a choice among what was proposed ("Let's go with ...", "These tips fit ...") are
    no rule for the assistant: the shipped classifier kept such sentences of BEAM 11-20's chats as instructions,
    shown atop every block of their chats. Said with `you` or a standing word they still reach the classifier."""
    detector = make_detector(make_settings(tmp_path))
    said = [
        "Always give me times in the 24-hour format.",
        "Then, I'll use the Pomodoro technique to prioritize my chores and start time-blocking in my calendar.",
        "I think the hardest part will be keeping my evenings free of work calls.",
        "Starting each morning with a short walk should help me focus before the meetings.",
        "Let's go with Thursday at 6 PM for the rehearsal dinner.",
        "These suggestions fit pretty well with the workouts I already do.",
        "Booking the hall right after the budget is approved works perfectly.",
        "I prefer short answers with the code first.",
    ]
    found = detector.detect([Message(id=str(i), role="user", content=t) for i, t in enumerate(said)])
    assert [(d.message_id, d.kind) for d in found] == [("0", "instruction"), ("7", "preference")]
    assert all(reacts_or_hedges(t) for t in said[1:7])
    for kept in (
        "I'll always want the answers in Spanish.",
        "I think you will need to reply in French from now on.",
        "Let's go with metric units from now on.",
        "Let's do British spelling instead.",
        "I prefer short answers with the code first.",
    ):
        assert not reacts_or_hedges(kept), kept


def test_a_rule_inside_code_or_a_requested_text_is_not_the_users(tmp_path: Path) -> None:
    """A code comment or a line of code, and a text the user asks for whose content is a rule (an email, a sign),
    hold a rule for their readers, not for the assistant's answers: neither the rules nor the classifier keep
    them. The same rule said to the assistant is kept; a standing rule asked as a question reaches the classifier
    (`standing_request`), a question that asks to find something out does not."""
    detector = make_detector(make_settings(tmp_path))
    said = [
        "// never call this from the UI thread",
        "Write a note to my flatmates saying that from now on the bins go out on Sundays.",
        "Draft a sign for the office kitchen: always wash your own mug.",
        "Use metric units from now on.",
    ]
    found = detector.detect([Message(id=str(i), role="user", content=t) for i, t in enumerate(said)])
    assert [d.message_id for d in found] == ["3"]
    assert not_own_rule("x = load(path)  # always close the handle after") and not not_own_rule(said[3])
    assert standing_request("Could you always use metric units?")
    assert standing_request("Would you mind using British spelling from now on?")
    assert not standing_request("Could you always tell me why a test failed?")
    assert not standing_request("Could you explain closures again?")


def test_instruction_detector_chooses_the_rules_or_the_model(tmp_path: Path, fake_openai: LoopbackOpenAI) -> None:
    """INSTRUCTION_DETECTOR=pattern keeps the model out of the chunk step even with an openai summariser;
    openai asks the model whatever the summariser."""
    llm = {"openai_api_key": fake_openai.api_key, "openai_base_url": fake_openai.base_url}
    assert isinstance(make_detector(make_settings(tmp_path, summariser="openai", **llm)), OpenAIDetector)
    assert isinstance(
        make_detector(make_settings(tmp_path, summariser="openai", instruction_detector="pattern", **llm)),
        PatternDetector,
    )
    assert isinstance(
        make_detector(make_settings(tmp_path, summariser="extractive", instruction_detector="openai", **llm)),
        OpenAIDetector,
    )


def test_descriptions_fit_an_openapi_document() -> None:
    for model in (Detected, Instruction):
        for name, field in model.model_fields.items():
            assert field.description and len(field.description) < 300, (model.__name__, name)


# --- settling stored instructions (datastore/write/instructions.py uses these) -------------------------------------


def test_settle_compares_only_the_fresh_pairs_and_agrees_with_supersede(
    superseder: Superseder, embedder: LocalEmbedder
) -> None:
    """Instructions in force were compared when stored; settling a few fresh ones among them (wherever they fall
    in time) gives what supersede over all of them gives."""
    in_force = [instruction(f"s{k}", later) for k, (_, later, same) in enumerate(SUBJECT_PAIRS) if same is False]
    in_force = [i for k, i in enumerate(in_force) if all(not superseder.same_subject(o, i) for o in in_force[:k])]
    fresh = [
        instruction("f1", "From now on answer in German."),
        instruction("f2", "Always use emojis."),
        instruction("f3", "Always give temperatures in Kelvin."),
    ]
    items = in_force[:3] + [fresh[0]] + in_force[3:8] + [fresh[1]] + in_force[8:] + [fresh[2]]
    vectors = embedder.embed([said(i) for i in items])
    settled = superseder.settle(items, vectors, {"f1", "f2", "f3"})
    assert settled == superseder.supersede([], items, vectors)
    assert superseder.settle(items, vectors, set()) == items and items[0].superseded_by is None
    replaced = {i.id: i.superseded_by for i in settled if i.superseded_by}
    assert replaced and all(i.startswith("f") or by.startswith("f") for i, by in replaced.items())


def test_after_removal_points_each_at_the_next_kept_one_along_its_chain() -> None:
    chain = [
        Instruction(id=i, text=i, kind="instruction", subject="s", speaker="u", superseded_by=nxt)
        for i, nxt in (("a", "b"), ("b", "c"), ("c", "d"), ("d", None), ("x", None))
    ]
    assert after_removal(chain, {"b"}) == {"a": "c"}
    assert after_removal(chain, {"b", "c"}) == {"a": "d"}
    assert after_removal(chain, {"d"}) == {"c": None}
    assert after_removal(chain, {"c", "d"}) == {"b": None}
    assert after_removal(chain, {"x"}) == {} and after_removal(chain, set()) == {}
    loop = [
        Instruction(id="p", text="p", kind="instruction", subject="s", speaker="u", superseded_by="q"),
        Instruction(id="q", text="q", kind="instruction", subject="s", speaker="u", superseded_by="p"),
    ]
    assert after_removal(loop, {"q"}) == {"p": None}  # a stored cycle ends; nothing points at itself


def test_said_order_is_when_said_then_when_stored() -> None:
    t = datetime(2024, 1, 1, tzinfo=UTC)
    old = Instruction(
        id="z", text="a", kind="instruction", subject="", speaker="u", created_at=t, recorded_at=t.replace(year=2026)
    )
    untimed = Instruction(
        id="a", text="b", kind="instruction", subject="", speaker="u", recorded_at=t.replace(year=2025)
    )
    same_message = old.model_copy(update={"id": "y", "recorded_at": t.replace(year=2026, microsecond=1)})
    assert [i.id for i in sorted([same_message, untimed, old], key=said_order)] == ["z", "y", "a"]


# --- the cases a new user hit (issue 25) -----------------------------------------------------------------------------


def test_actually_answer_in_english_again_replaces_answer_in_french(superseder: Superseder) -> None:
    """A correction is an instruction, and it replaces the rule it corrects."""
    french = instruction("fr", "From now on, always answer in French.")
    english = instruction("en", "Actually, answer in English again.")
    tabs = instruction("tabs", "Always use tabs for indentation.")
    out = superseder.supersede([french, tabs], [english])
    assert [(i.id, i.superseded_by) for i in out] == [("fr", "en"), ("tabs", None), ("en", None)]


@pytest.mark.parametrize(
    "earlier,revocation",
    [
        ("From now on, always answer in French.", "Forget what I said about French."),
        ("Always use bullet points in your answers.", "Never mind the bullet points."),
        ("I'm vegetarian, keep that in mind.", "I'm no longer vegetarian."),
        ("From now on, always answer in French.", "I don't need answers in French anymore."),
    ],
)
def test_a_revocation_withdraws_the_rule_and_is_no_rule_itself(
    superseder: Superseder, earlier: str, revocation: str
) -> None:
    other = instruction("other", "Always include version numbers.")
    out = superseder.supersede([instruction("old", earlier), other], [instruction("rev", revocation)])
    assert [(i.id, i.superseded_by) for i in out] == [("old", "rev"), ("other", None), ("rev", "rev")]


def test_im_vegetarian_keep_that_in_mind_is_kept() -> None:
    for text in (
        "I'm vegetarian, keep that in mind.",
        "Remember that I'm allergic to peanuts.",
        "Please remember: I work night shifts.",
    ):
        found = detect(text)
        assert len(found) == 1 and found[0].statement.rstrip(".") in text, text


def test_advice_between_people_is_not_an_instruction() -> None:
    """In a chat between people (no assistant), one person's advice to the other is no rule for the assistant;
    what the conversation's `user` says of their own tastes is a preference, and nobody's without a `user`."""
    chat = [
        Message(id="1", speaker="Audrey", content="And remember to stay patient during the grooming process."),
        Message(id="2", speaker="Andrew", content="Thanks! Always keep treats in your pocket at the park."),
        Message(id="3", speaker="Audrey", content="My favorite recipe is Chicken Pot Pie."),
    ]
    found = PatternDetector().detect(chat, user="Audrey")
    assert [(d.message_id, d.kind) for d in found] == [("3", "preference")]
    assert PatternDetector().detect(chat) == [] and PatternDetector().detect(chat, user="Andrew") == []
    with_assistant = [*chat, Message(id="4", speaker="assistant", content="Noted.")]
    assert {d.message_id for d in PatternDetector().detect(with_assistant)} >= {"1", "2"}


JON_AND_GINA = [  # a LoCoMo-style chat between two people, no assistant
    Message(id="1", speaker="Gina", content="That sounds rough. And remember, I'm always here for you."),
    Message(id="2", speaker="Jon", content="Thanks Gina. I'm vegetarian, keep that in mind."),
    Message(id="3", speaker="Gina", content="I prefer Thai food, keep that in mind."),
]


def test_a_chat_between_people_is_read_for_its_user_only() -> None:
    """Neither side's encouragement or preference is kept without the conversation's `user`; with it, only that
    speaker's preferences (case aside). A chat with an assistant is read as before, whatever `user` says."""
    assert PatternDetector().detect(JON_AND_GINA) == []
    found = PatternDetector().detect(JON_AND_GINA, user="jon")
    assert [(d.message_id, d.speaker, d.statement) for d in found] == [
        ("2", "Jon", "I'm vegetarian, keep that in mind.")
    ]
    with_assistant = [*JON_AND_GINA, Message(id="4", role="assistant", content="Noted.")]
    assert {d.message_id for d in PatternDetector().detect(with_assistant)} >= {"2", "3"}
    assert PatternDetector().detect(CHAT, user="Somebody else") == PatternDetector().detect(CHAT)


# Said to the other person: a promise, support, encouragement. About the two of them, not a standing preference of
# the speaker's for an assistant, however it asks to be remembered.
TO_THE_LISTENER = [
    "And remember, I'm always here for you.",
    "Remember that I'll always support you.",
    "Don't forget, I'm proud of you.",
    "I'm on your side no matter what, keep that in mind.",
    "Just remember: I believe in you.",
]


@pytest.mark.parametrize("content", TO_THE_LISTENER)
def test_what_one_says_to_the_listener_is_no_preference(content: str) -> None:
    """Neither in the memory of the one who says it (the conversation's `user`) nor in a chat with an assistant."""
    chat = [
        Message(id="1", speaker="Gina", content=f"That sounds rough. {content}"),
        Message(id="2", speaker="Jon", content="Thanks, that means a lot."),
    ]
    assert PatternDetector().detect(chat, user="Gina") == [], content
    assert detect(content) == [], content


def test_a_statement_for_the_assistant_that_names_it_is_still_kept() -> None:
    """What the listener is named in by a statement's own rule still counts: the rule is about a fact kept."""
    for content, statement in (
        ("Remember: I prefer you to answer briefly.", "I prefer you to answer briefly."),
        ("Keep in mind that I like it when you use bullet points.", None),
        ("I'm vegetarian, keep that in mind.", "I'm vegetarian, keep that in mind."),
    ):
        found = detect(content)
        assert len(found) == 1 and found[0].kind == "preference", content
        assert statement is None or found[0].statement == statement, content


def test_the_model_detector_keeps_only_the_users_statements_between_people(
    tmp_path: Path, fake_openai: LoopbackOpenAI
) -> None:
    fake_openai.chat_reply = lambda body: answer(
        {"message_id": "1", "text": "And remember, I'm always here for you.", "kind": "preference", "subject": "x"},
        {"message_id": "2", "text": "I'm vegetarian, keep that in mind.", "kind": "preference", "subject": "diet"},
    )
    detector = llm_detector(tmp_path, fake_openai)
    assert detector.detect(JON_AND_GINA) == []
    assert [d.message_id for d in detector.detect(JON_AND_GINA, user="Jon")] == ["2"]
    fake_openai.fail_next = 10  # the rules' fallback follows the same rule
    assert [d.message_id for d in detector.detect(JON_AND_GINA, user="Jon")] == ["2"]
