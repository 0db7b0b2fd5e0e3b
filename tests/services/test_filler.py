"""services/filler.py: the one rule of what says nothing (the lines' and the summaries')."""

from __future__ import annotations

import pytest

from services.filler import is_filler

NAMES = {"Caroline", "Melanie"}


@pytest.mark.parametrize(
    "sentence",
    [
        "Thanks, Caroline!",
        "Cool, thanks Mel!",  # a short form of a speaker's name
        "Thanks, Mell!",
        "Wow, Caroline!",
        "Sure!",
        "Great question.",
        "Sounds great!",
        "How about you?",
        "That's awesome, I'm so happy for you!",
        "Hey Mel!",
        "Take care of yourself.",
        "Thanks for the tip, Caroline.",  # one content word, short and common: says nothing
        "Long time no see!",
        "That sounds like a really thorough plan.",  # praise openers seen leading BEAM's answers
        "That sounds like a wise decision.",
        "It sounds like you have a solid plan in place.",
        "That's exactly what I needed.",
        "That's really helpful!",
        "That sounds like a solid plan.",
        "Your support means a lot.",  # what the summariser's own list knew
        "Gotcha, Jon!",  # a name addressed
        "Thanks Jo!",
        "How was your weekend?",  # a question back
    ],
)
def test_filler_says_nothing(sentence: str) -> None:
    assert is_filler(sentence, NAMES)


@pytest.mark.parametrize(
    "sentence",
    [
        "I'm vegetarian, keep that in mind.",  # one content word, specific
        "I went to a LGBTQ support group yesterday.",
        "My flight lands at 9.",  # a number
        "We met Oscar.",  # a name inside the sentence
        "Researching adoption agencies.",
        "That's why the probability is 0.",  # opens like praise, says something
        "That sounds like a productive meeting with Patrick!",  # a name: it informs
        "That sounds like a plan to visit Kyoto.",
        "I love Paris!",  # a name, not addressed
        "I'm really enjoying my new job.",  # "job" says something ("Good job!" is short and says nothing)
    ],
)
def test_a_sentence_that_informs_is_not_filler(sentence: str) -> None:
    assert not is_filler(sentence, NAMES)


FILLER_LINES = [
    "Thanks, Caroline!",
    "Cool, thanks Mel!",
    "Wow, Caroline!",
    "Sounds great!",
    "That's so cool!",
    "I totally agree, Melanie.",
    "How about you?",
    "And you?",
    "How's it going?",
    "Hey Melanie!",
    "Take care!",
    "I'm so proud of you!",
    "Congrats!",
]
INFORMATIVE_LINES = [
    "I love painting!",
    "I applied to adoption agencies last week.",
    "How about you adopt a dog?",
    "Thanks for the book about Paris, I start it tomorrow.",
    "My son turned 5 on 3 May.",
]


def test_the_filler_rule() -> None:
    """The summaries' cases (they kept their own rule until both used this one): greetings, thanks,
    acknowledgements, bare exclamations and questions back say nothing; a sentence with one specific content word,
    a name of a place or a date says something."""
    names = {"Caroline", "Melanie", "Mel"}
    assert [s for s in FILLER_LINES if not is_filler(s, names)] == []
    assert [s for s in INFORMATIVE_LINES if is_filler(s, names)] == []
