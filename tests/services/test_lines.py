"""services/lines.py: a message's informative lead (and a long message's point), filler left out."""

from __future__ import annotations

from services.lines import MAX_LINE_TOKENS, SEPARATOR, SHORT_LEAD_TOKENS, lead_lines, line_text, sentences
from services.tokens import count_tokens
from tests.support.synthetic import DATABASE_ANSWER

NAMES = {"Caroline", "Melanie"}


def test_the_lead_is_the_first_sentence_that_is_not_filler() -> None:
    assert line_text("Hey Mel! Thanks! I went to a support group yesterday. It was great.", NAMES) == (
        "I went to a support group yesterday."
    )
    assert line_text("Sure! Here is how you set up a virtual environment in Python.") == (
        "Here is how you set up a virtual environment in Python."
    )
    assert line_text("Thanks, Caroline! Sounds great.", NAMES) is None  # nothing but filler: no line
    assert line_text("```\nprint(1)\n```") is None  # code is no one's lead


def test_a_long_message_adds_the_sentence_that_states_its_point() -> None:
    answer = DATABASE_ANSWER
    lines = lead_lines(answer)
    assert lines == [
        "Let's look at your options for the database.",
        "In short, PostgreSQL suits your relational data best, with replication for the read load.",
    ]
    assert line_text(answer) == SEPARATOR.join(lines)
    assert lead_lines("Short one. With two sentences. And a third one here.") == [
        "Short one. With two sentences. And a third one here."  # a short message: no point, its short lead grows
    ]


def test_a_short_lead_of_a_short_message_takes_what_follows_without_its_filler() -> None:
    # a new user's outline kept "Preikestolen at sunrise." and "Yes please." and lost the plans that followed
    assert line_text("Preikestolen at sunrise. Next month I am going skiing in the Alps, in Chamonix.") == (
        "Preikestolen at sunrise. Next month I am going skiing in the Alps, in Chamonix."
    )
    assert line_text("Yes please. Also I booked a weekend in Rome for my birthday in April.") == (
        "Also I booked a weekend in Rome for my birthday in April."
    )
    assert line_text("Hi Mel! I adopted a dog. Thanks so much! She is a beagle.", NAMES) == (
        "I adopted a dog. She is a beagle."  # filler between two informative sentences is left out
    )
    lead = "I planted tomatoes, peppers, beans, squash, cucumbers and onions in the garden this spring."
    assert count_tokens(lead) >= SHORT_LEAD_TOKENS
    assert line_text(f"{lead} We hope for a good harvest.") == lead  # a lead that says enough stands alone
    long = (
        "My neighbour Alice, who lives across the street with her three dogs, two cats and a parrot called Pip, "
        "lent me her old red ladder last weekend so that I could climb up onto the garage and check all of the "
        "loose tiles above the kitchen, but it was too short and it wobbled."
    )
    assert line_text(f"The roof leaks. {long} The end.") == "The roof leaks."  # the next would pass MAX_LINE_TOKENS


def test_a_long_sentence_is_cut_at_a_word() -> None:
    long = "I planted " + ", ".join(f"a row of tomatoes number {i}" for i in range(60)) + "."
    (line,) = lead_lines(long)
    assert line.endswith("…") and count_tokens(line) <= MAX_LINE_TOKENS + 1
    assert long.startswith(line[:-1].rstrip())


def test_sentences_are_the_prose_sentences_and_list_items() -> None:
    text = "First point here. Second one?\n- an **item**\n2. `another` one\n```\ncode()\n```"
    assert sentences(text) == ["First point here.", "Second one?", "an item", "another one"]  # markdown dropped
