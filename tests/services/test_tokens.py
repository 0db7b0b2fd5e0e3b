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
