"""The embedder meter: the word pieces it counts are those the local model reads."""

from __future__ import annotations

from bench.meters import CountingEmbedder, minilm_pieces
from services.embedding import LocalEmbedder


def test_counting_embedder_counts_the_word_pieces_the_model_reads(embedder: LocalEmbedder) -> None:
    counter = CountingEmbedder(embedder, minilm_pieces())
    counter.embed(["hello world", "Caroline went to the LGBTQ support group"])
    counter.embed(["word " * 400])  # truncated at 256, [CLS] and [SEP] included
    counter.embed([])
    # "hello world" -> [CLS] hello world [SEP]; the second sentence's rare word splits into several pieces
    assert counter.texts == 3 and counter.calls == 3
    first = counter.pieces - 256
    assert first > 4 + 9  # more pieces than words: 'lgbtq' is not one piece
    plain = CountingEmbedder(embedder)
    plain.embed(["hello world"])
    assert plain.pieces == 0 and minilm_pieces()(["hello world"]) == 4
