"""Synthetic stores for the scale points: n L1 nodes in one namespace, written straight through `_commit`.

Texts are 5 chat lines of words drawn by frequency from LoCoMo's own vocabulary (so full-text posting lists have
a natural skew); vectors are unit vectors of dimension 384 scattered around 2,000 random centres (like real
sentence embeddings, which crowd into topics; uniform noise on the sphere would have no near neighbours for an
ANN index to find). Queries are drawn the same way. Nodes are sealed L1 chunks, 1,000 per conversation, each over
5 stored messages, rolled up into the tree `remember` would make (`services.tree.roll_up`, FAN_OUT and MAX_LEVEL
of the default settings: 249 summaries per 1,000 chunks): a summary's text is the first words of each child's
first line, its vector the normalised mean of its children's. Without the summaries the server's background
indexer would start rolling the store up while a benchmark times queries. Nothing is embedded: it is fast, about
1,500 nodes/s here.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime, timedelta

import numpy as np

from bench import dataset
from datastore.memory import Memory
from datastore.storage import SourceRow, WriteBatch
from models.memory import MemoryNode, Sentence, StoredMessage
from models.settings import Settings
from services.chunking import MAX_SENTENCE_TOKENS
from services.summarising import Summary
from services.tokens import count_tokens
from services.tree import Frontier, roll_up

PER_SOURCE = 1000
CENTRES = 2000
SPREAD = 0.35  # noise around a centre, relative to its unit length


def unit_vectors(rng: np.random.Generator, count: int) -> np.ndarray:
    """float32 (count, 384) unit vectors around the fixed CENTRES (the same centres for nodes and queries)."""
    centres = np.random.default_rng(12345).standard_normal((CENTRES, 384))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    v = centres[rng.integers(0, CENTRES, count)] + SPREAD * rng.standard_normal((count, 384)) / np.sqrt(384) * 3
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


LINES = 5
WORDS_PER_LINE = (8, 40)
SPEAKERS = ("Alice", "Bob")
SUMMARY_WORDS = 12  # words taken from each child's first line


def _summarise(children: list[MemoryNode], context: MemoryNode | None) -> Summary:
    """A cheap stand-in for the extractive summariser: the first words of each child's first line."""
    text = "\n".join(" ".join(c.text.split("\n", 1)[0].split()[:SUMMARY_WORDS]) for c in children) + "\n"
    return Summary(text, [], "synthetic")


def with_summaries(leaves: list[tuple[MemoryNode, np.ndarray]]) -> list[tuple[MemoryNode, np.ndarray | None]]:
    """The sealed L1 `leaves` (node, vector) of one conversation followed by their summaries, rolled up as
    `remember` does; each summary's vector is the normalised mean of its children's. Sets the children's
    parent_id."""
    defaults = Settings(_env_file=None)
    made = roll_up(Frontier(), [n for n, _ in leaves], _summarise, defaults.fan_out, defaults.max_level)
    vectors = {n.id: v for n, v in leaves}
    out: list[tuple[MemoryNode, np.ndarray | None]] = list(leaves)
    for node in made:  # lowest level first: children's vectors are known
        mean = np.sum([vectors[c] for c in node.children], axis=0)
        vectors[node.id] = (mean / np.linalg.norm(mean)).astype(np.float32)
        out.append((node, vectors[node.id]))
    return out


def vocabulary() -> tuple[list[str], np.ndarray]:
    """LoCoMo's words and their relative frequencies (falls back to a tiny list without the data)."""
    try:
        samples = dataset.load()
        text = " ".join(
            t["text"] for s in samples for k in dataset.session_keys(s["conversation"]) for t in s["conversation"][k]
        )
    except FileNotFoundError:
        text = "memory garden lake cabin violin bakery sister train museum recipe concert hiking piano " * 10
    counts = Counter(re.findall(r"[a-z']+", text.lower()))
    words = list(counts)
    freq = np.array([counts[w] for w in words], dtype=np.float64)
    return words, freq / freq.sum()


LINE_WORDS = 16  # words of a message a synthetic line keeps (a lead sentence is about this long)


def sentences(content: str) -> list[Sentence]:
    """A synthetic message's sentences, stored with it as `remember` stores a message's (services/chunking.
    `measure`): one, the whole content, which holds no sentence end (lower-case words and apostrophes: `vocabulary`)
    and stays under MAX_SENTENCE_TOKENS; what `split_message` gives it (tests/bench/test_synthetic.py), without
    the splitter's ~0.3 ms a message (500k messages at 100k chunks). Without them every first read of a message
    split it again, which a real store's messages (sentences kept since migration 010) never need: ~30 ms of a
    cold /context at 2k nodes (bench/RESULTS.md, many users)."""
    tokens = count_tokens(content)
    if not content.strip() or tokens > MAX_SENTENCE_TOKENS:
        raise ValueError("a synthetic message is one sentence of up to MAX_SENTENCE_TOKENS tokens")
    return [Sentence(start=0, end=len(content), tokens=tokens)]


def fill(memory: Memory, ns: str, n: int, seed: int = 0, with_lines: bool = False) -> None:
    """Add n sealed L1 nodes (with their messages) and their summaries to namespace `ns` of an empty store.
    with_lines: also a line (a level-0 node, datastore/read/outline.py) per message: its first LINE_WORDS words,
    its vector near its chunk's (5,000 lines per conversation: more than a real one of 1,000 chunks holds)."""
    rng = np.random.default_rng(seed)
    words, p = vocabulary()
    words_arr = np.array(words, dtype=object)
    start = datetime(2024, 1, 1, tzinfo=UTC)
    for s0 in range(0, n, PER_SOURCE):
        count = min(PER_SOURCE, n - s0)
        sid = f"synthetic-{s0 // PER_SOURCE:05d}"
        vecs = unit_vectors(rng, count)
        lengths = rng.integers(*WORDS_PER_LINE, size=count * LINES)
        drawn = words_arr[rng.choice(len(words), size=int(lengths.sum()), p=p)]
        cuts = np.concatenate([[0], np.cumsum(lengths)])
        messages, nodes = [], []
        for i in range(count):
            when = start + timedelta(minutes=s0 + i)
            ids, lines = [], []
            for j in range(LINES):
                k = i * LINES + j
                speaker = SPEAKERS[j % 2]
                content = " ".join(drawn[cuts[k] : cuts[k + 1]])
                mid = f"m{i}-{j}"
                ids.append(mid)
                lines.append(f"{speaker}: {content}")
                messages.append(
                    StoredMessage(
                        id=mid,
                        source_id=sid,
                        seq=k,
                        speaker=speaker,
                        content=content,
                        created_at=when,
                        tok_offset=k * 40,
                        n_tokens=40,
                        sentences=sentences(content),
                    )
                )
            nodes.append(
                (
                    MemoryNode(
                        id=f"c1_{sid}_{i}",
                        source_id=sid,
                        level=1,
                        position=i,
                        text="\n".join(lines) + "\n",
                        token_count=200,
                        message_ids=ids,
                        speakers=list(SPEAKERS),
                        start_time=when,
                        end_time=when,
                        sealed=True,
                        tok_start=i * 200,
                        tok_end=(i + 1) * 200,
                    ),
                    vecs[i],
                )
            )
        src = SourceRow(
            sid, "conversation", 1, n_messages=len(messages), n_tokens=count * 200, max_seq=len(messages) - 1
        )
        rolled = with_summaries(nodes)
        if with_lines:
            rolled += line_nodes(rng, messages, [c for c, _ in nodes], vecs)
        memory.storage.commit(ns, WriteBatch(source=src, messages=messages, nodes=rolled), 0)


def line_nodes(
    rng: np.random.Generator, messages: list[StoredMessage], chunks: list[MemoryNode], vecs: np.ndarray
) -> list[tuple[MemoryNode, np.ndarray | None]]:
    """One level-0 line per message (LINES messages per chunk, in order): its first LINE_WORDS words, no parent
    (a line is not a node of the tree), its vector its chunk's plus noise."""
    noise = rng.standard_normal((len(messages), vecs.shape[1])).astype(np.float32) * 0.05
    out: list[tuple[MemoryNode, np.ndarray | None]] = []
    for k, m in enumerate(messages):
        chunk = chunks[k // LINES]
        v = vecs[k // LINES] + noise[k]
        node = MemoryNode(
            id=f"l0_{chunk.source_id}_{k}",
            source_id=chunk.source_id,
            level=0,
            position=k,
            text=" ".join(m.content.split()[:LINE_WORDS]),
            token_count=20,
            message_ids=[m.id],
            speakers=[m.speaker],
            start_time=m.created_at,
            end_time=m.created_at,
            tok_start=m.tok_offset,
            tok_end=m.tok_offset + m.n_tokens,
        )
        out.append((node, (v / np.linalg.norm(v)).astype(np.float32)))
    return out
