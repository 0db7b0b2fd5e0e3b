"""Excerpts: the sentences of a chunk closest to a query, each whole, in order, under a token budget.

Pure logic over strings (no storage, no model): the /context block uses it to hold more evidence per token.
One module per concern:

- `units`: a rendered text cut into units (sentences, list items, headings, table rows, code lines), each with
  its span and its message's speaker (`segment`, `Unit`);
- `lexical`: how close a unit is to a query (`term_weights`, numbers and dates; words and terms are
  services/text.py's, `terms` re-exported here for the block's callers);
- `choose`: the units kept under the budget and rendered with elision marks (`excerpt`, `Excerpt`);
- `dedup`: fingerprints of the units shown, so a block shows each sentence once (`fingerprint`, `remove_seen`).

The names below are the package's API; callers import them from `services.excerpts`.
"""

from services.excerpts.choose import MIN_FILL_WORDS, Excerpt, Scores, excerpt, inline_elisions
from services.excerpts.dedup import fingerprint, fingerprints, normalise_line, remove_seen
from services.excerpts.lexical import NUMBER_BONUS, term_weights
from services.excerpts.units import BROKEN, ELISION, Kind, Unit, segment
from services.text import terms

__all__ = [
    "BROKEN",
    "ELISION",
    "MIN_FILL_WORDS",
    "NUMBER_BONUS",
    "Excerpt",
    "Kind",
    "Scores",
    "Unit",
    "excerpt",
    "fingerprint",
    "fingerprints",
    "inline_elisions",
    "normalise_line",
    "remove_seen",
    "segment",
    "term_weights",
    "terms",
]
