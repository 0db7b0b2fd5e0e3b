from hypothesis import given, settings
from hypothesis import strategies as st

from services import tokens


def test_cl100k_loads_offline_and_matches_known_ids() -> None:
    # cl100k_base ids of "hello world" (as returned by tiktoken online)
    assert tokens.encode("hello world") == [15339, 1917]
    assert tokens.get_encoding().name == "cl100k_base"


def test_count_decode_and_truncate_round_trip() -> None:
    text = "Caroline went to the LGBTQ support group on 7 May 2023."
    ids = tokens.encode(text)
    assert tokens.count_tokens(text) == len(ids)
    assert tokens.decode(ids) == text
    cut = tokens.truncate(text, 5)
    assert tokens.count_tokens(cut) <= 5 and text.startswith(cut)


def test_special_token_text_is_plain_text() -> None:
    assert tokens.count_tokens("<|endoftext|>") > 1


def test_counts_are_remembered_only_for_short_texts() -> None:
    """A count read from the memo equals the tokenizer's; a text over MEMO_CHARS is counted, not kept."""
    short = "Caroline went to the support group yesterday. " * 3
    long = "x y " * (tokens.MEMO_CHARS // 4 + 1)
    assert len(long) > tokens.MEMO_CHARS >= len(short)
    before = tokens._count_short.cache_info().currsize
    assert tokens.count_tokens(short) == tokens.count_tokens(short) == len(tokens.encode(short))
    assert tokens.count_tokens(long) == len(tokens.encode(long))
    assert tokens._count_short.cache_info().currsize <= before + 1


# every character Python calls white space, which holds Unicode's White_Space and U+001C-U+001F
_SPACES = "".join(c for c in map(chr, range(0x110000)) if c.isspace())
# pieces of text: white space, letters, digits, punctuation, contractions and words, in any order
_TEXT = st.lists(
    st.sampled_from([*_SPACES, *"aZé東😀09.,!?'’-_#()\"…", "'s", "'ll", "hello", "12345", "...", "\r\n"]),
    max_size=40,
).map("".join)


def test_white_space_is_unicode_white_space() -> None:
    """min_tokens splits words at Unicode's White_Space (what `\\s` means in cl100k's pattern), not at the four
    separators U+001C-U+001F, which Python's str.split also splits at."""
    words = {c for c in _SPACES if tokens.min_tokens(f"a{c}b") == 2}
    assert words == set(_SPACES) - set("\x1c\x1d\x1e\x1f")


@settings(max_examples=400, deadline=None)
@given(_TEXT, st.integers(min_value=0, max_value=40))
def test_min_tokens_bounds_the_count_and_fits_agrees(text: str, limit: int) -> None:
    """Every word costs a token at least, so `fits` says what counting says."""
    n = tokens.count_tokens(text)
    assert tokens.min_tokens(text) <= n
    assert tokens.fits(text, limit) == (n <= limit)
