"""Who a text names among the speakers (services/speakers.py `named_in`): a person's name as written, as a word."""

from __future__ import annotations

from services.speakers import named_in

SPEAKERS = {"Jon", "John", "Gina", "user", "assistant", "Anne-Marie", ""}


def test_a_name_is_found_as_a_word_as_written() -> None:
    assert named_in("What book is Jon reading?", SPEAKERS) == {"Jon"}
    assert named_in("Where did John's family go?", SPEAKERS) == {"John"}
    assert named_in("Did Gina and Jon meet?", SPEAKERS) == {"Gina", "Jon"}
    assert named_in("What did Anne-Marie bake?", SPEAKERS) == {"Anne-Marie"}


def test_a_name_inside_another_word_or_in_another_case_is_not() -> None:
    assert named_in("What book is John reading?", {"Jon"}) == set()  # "Jon" inside "John"
    assert named_in("Jonathan called", {"Jon"}) == set()
    assert named_in("jon is lowercase here", {"Jon"}) == set()


def test_roles_and_the_machinery_are_not_names() -> None:
    assert named_in("What did the user ask the assistant?", SPEAKERS) == set()
    assert named_in("user assistant", {"user", "assistant", "system"}) == set()


def test_a_name_that_opens_a_sentence_counts_only_as_a_possessive() -> None:
    people = {"Will", "May", "Jon"}
    assert named_in("Will you remind me tomorrow? May I ask one more thing?", people) == set()
    assert named_in("Will's birthday is when? And what did May bring?", people) == {"Will", "May"}
    assert named_in('She said "Jon is late" again.', people) == set()
