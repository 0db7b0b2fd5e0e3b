"""Excerpts: the stored sentences of a memory closest to a query, each whole, in order, under a token budget.

Pure logic over a memory's stored sentences (services/chunking.SpanSentence: ids, speaker, time, text; split
once, when their message was stored): the /context block uses it to hold more evidence per token. Nothing is
parsed again here. One module per concern:

- `lexical`: IDF weights of terms over a request's candidates (`term_weights`; words and terms are
  services/text.py's, `terms` and `terms_held` re-exported here for the block's callers);
- `choose`: the sentences kept under the budget and rendered with elision marks by the one renderer of
  sentences (`excerpt`, `Excerpt`, `render`); what a block already shows is named by sentence ids.

The names below are the package's API; callers import them from `services.excerpts`.
"""

from services.excerpts.choose import ELISION, MIN_FILL_WORDS, Excerpt, excerpt, render
from services.excerpts.lexical import term_weights
from services.text import terms, terms_held

__all__ = ["ELISION", "MIN_FILL_WORDS", "Excerpt", "excerpt", "render", "term_weights", "terms", "terms_held"]
