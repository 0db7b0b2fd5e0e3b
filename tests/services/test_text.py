"""services/text.py: one analyser (words, folding, one stemmer) and one sentence splitter, the same for BM25,
excerpts, query terms, instruction detection, summaries and chunk cuts."""

from __future__ import annotations

import math

from datastore.indexes.text import TextIndex
from models.memory import StoredMessage
from services import excerpts, instruction_rules
from services.chunking import SentenceStream, measure, plan_windows, span_sentences
from services.text import sentence_spans, sentences, stem, term_set, terms, terms_held, text_terms, words

TEXT = "Running runners ran to the Café Naïve; generously, the violins played 2023 songs and rays were used."


def index_of(*texts: str) -> TextIndex:
    index = TextIndex()
    n = len(texts)
    index.add(list(range(1, n + 1)), list(texts), [0] * n, [math.nan] * n, [math.nan] * n)
    return index


def test_bm25_excerpts_and_instruction_detection_see_the_same_terms() -> None:
    expected = {stem(w) for w in words(TEXT)}
    assert "cafe" in words(TEXT) and "naive" in words(TEXT)  # folded: case and Latin diacritics
    index = index_of(TEXT)
    assert set(index.vocab.terms) == expected == term_set(TEXT)  # what BM25 indexes
    assert set(excerpts.term_weights([TEXT])) == expected  # what excerpts weigh units by
    assert excerpts.terms(TEXT) == terms(TEXT) == list(dict.fromkeys(stem(w) for w in text_terms(TEXT)))
    # a query finds the terms the index holds for its words
    assert set(index.query_terms(text_terms(TEXT))) == {index.vocab.terms[t] for t in terms(TEXT)}
    # instruction detection's topic stems are the same terms of its content words (it keeps "+", "#" and "-"
    # inside a word, for names such as C++, C# and e-mail)
    topic = instruction_rules.topic_stems(TEXT)
    assert topic and topic <= expected
    content = [w for w in words(TEXT) if w.isalpha() and len(w) > 1 and w not in instruction_rules._KEY_STOP]
    assert topic == {stem(w) for w in content}


def test_bm25_reads_an_ascii_text_as_the_analyser_does() -> None:
    # ASCII texts take the index's one-pass byte path; the same words with a diacritic take `words`
    ascii_text = "The CAFE's x-ray: 3.11 runners, don't stop!"
    index = index_of(ascii_text, ascii_text.replace("CAFE", "CAFÉ"))
    assert set(index.vocab.terms) == term_set(ascii_text)
    assert index.lengths[:2].tolist() == [len(words(ascii_text))] * 2


def test_excerpt_sentences_are_the_splitters() -> None:
    bodies = [
        "Great. Dr. Lee said the U.S. trip costs 2.5 thousand dollars. Really? ok. see you there",
        'I was thinking... maybe not. He said "Finding Freedom." Then he left…',
        "東京の寿司はとても美味しかったです。また行きたい？ Sure!",
        "See https://example.com/a.b?x=1 for details, e.g. the menu. Mr. and Mrs. Smith came at 3 p.m. today.",
    ]
    for body in bodies:  # an excerpt's sentences are a message's stored ones, as the splitter cut them
        msg = StoredMessage(id="m", source_id="c", seq=0, speaker="Ann", content=body)
        assert [s.text for s in span_sentences(msg)] == sentences(body)


def test_a_title_opens_its_sentence_wherever_it_stands() -> None:
    assert sentences("Great. Dr. Lee said hi. Mr. Smith too.") == ["Great.", "Dr. Lee said hi.", "Mr. Smith too."]
    assert sentences("Dr. Lee said hi.") == ["Dr. Lee said hi."]
    # every line break ends a sentence; spans index the text
    assert sentences("a list\n\nIt rained. We left.") == ["a list", "It rained.", "We left."]
    assert [(a, b) for a, b in sentence_spans("a list\n\nIt rained.")] == [(0, 6), (8, 18)]


def test_chunks_are_cut_where_the_splitter_ends_a_sentence() -> None:
    long = " ".join(f"Dr. Smith met Mr. Jones at 5 p.m. in St. Louis on day {i} of the long trip." for i in range(40))
    msgs = [StoredMessage(id="x", source_id="d", source_type="document", seq=0, speaker="doc", content=long)]
    measure(msgs, None, 0)
    ends = {e for _, e in sentence_spans(long)}
    assert [(s.start, s.end) for s in msgs[0].sentences] == sentence_spans(long)  # stored as the splitter said
    stream = SentenceStream.from_messages(msgs)
    windows = plan_windows(stream, 0, 100, 20, final=True)
    assert len(windows) > 3
    for w in windows[:-1]:
        text = stream.window_text(w)
        assert long.find(text) >= 0 and long.find(text) + len(text) in ends  # never after "Dr." or "p.m."


def test_terms_held_are_the_terms_of_the_text() -> None:
    """The cached set the block scores sentences by is `terms`' (stop words left out unless they are all)."""
    for text in ("Caroline: I went to a LGBTQ support group yesterday.", "Is it on?", "Naïve cafés, naive cafes", ""):
        assert terms_held(text) == set(terms(text))
    assert terms_held("Is it on?") == {"is", "it", "on"}
