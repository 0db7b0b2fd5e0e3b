"""BEAM benchmark of the context block: how much of a probing question's evidence the /context block holds on
BEAM's long chats, next to /query cut at the same budget.

BEAM (Tavakoli et al. 2025, "Beyond a Million Tokens", github.com/mohammadtavakoli78/BEAM): long chats (the
"100K" split's chats 11-20 hold 92k-180k cl100k tokens, 268-392 messages, five sessions weeks or months apart; user
messages ~46 tokens, assistant answers ~810) with probing questions that name the messages holding their answer
(`source_chat_ids`). The data is read from `--data` and never copied here.

Run: `.venv/bin/python -m bench.beam --data PATH` (about 10 minutes for 10 chats on 2 cores with a cold
embedding cache, ~95% of it embedding the chunks and summaries; under 2 minutes with a warm one). Options:
- `--data PATH`: the BEAM repository root, or its `chats/100K` folder (`<n>/chat.json`,
  `<n>/probing_questions/probing_questions.json`). Required.
- `--datastore local|postgres|pinecone`: the provider of the chat stores (bench/common.py starts PostgreSQL or the
  needledb emulator); not local: the section `beam-<provider>`.
- `--chats 11-20`: which chats, e.g. `11-20`, `1,3,5-7` (default 11-20, the development set; `1-10` is the
  held-out set: every tuned number of the block was chosen on 11-20, and a change is checked on 1-10 before it is
  kept).
- `--budgets 250,500,1000,2000`: token budgets (cl100k) of the block and of the cut /query results.
- `--out PATH`: the JSON of every number (default bench/out/beam.json).
- `--types event_ordering,summarization`: only these question types (a quicker development loop).
- `--reuse`: ask the stores an earlier run left under bench/out/beam (no ingest) when they hold the chat; for
  a loop over changes to how the block is assembled, not to what is stored.
- `--policy thread_weight=0.7,line_tokens=30`: the block's policy with these fields changed
  (datastore/context/policy.py `BlockPolicy`; numbers only), to measure a tuned number without editing code.
A run on the default chats and budgets (all types, no `--reuse`, no `--policy`) also writes the `beam` section of
bench/RESULTS.md (`--chats 1-10`: the `beam-held-out` section); other runs leave it.

1. Ingest. Each chat goes into a fresh local store (tree store, default settings, MiniLM through the on-disk
   embedding cache, as bench/context.py) as one conversation, `beam-<n>`. chat.json is a list of 5 batches,
   each `{"batch_number", "turns"}`, `turns` a list of exchanges (a user message and the assistant's answer,
   sometimes a follow-up or two: lists of 2-6 messages `{"role", "id", "content"}`), and the first user message
   of each batch has a `time_anchor` ("March-15-2024"). A batch is a session (`session_id` `batch-<number>`;
   BEAM's batches are its sessions, months apart, each with its own date), remembered with one remember call;
   the exchanges inside a batch are minutes of one sitting, not sessions. Messages: `speaker` = BEAM's role
   (`user` / `assistant`), `id` = BEAM's id (as a string, so evidence can be located), `created_at` = the last
   anchor seen (noon UTC) plus one second per message since it, so times increase strictly and each batch
   has its own date. BEAM's trailing annotation markers on user messages (`->-> 1,2`, also `->-> 1,5)` and
   `->-> 2,22, 24`) are stripped.
2. Questions. Every probing question with `source_chat_ids` (a list of ids, or a dict of lists: flattened,
   duplicates kept once) is asked after the chat (`now` = one minute after the last message); questions that
   name none (`abstention`; chat 18's two `summarization` questions have an empty list) are skipped.
   /context: `context_sync(ContextRequest(conversation_id, query=question, budget_tokens=B, now,
   all_conversations=False, recent=False))`: the recent-turns section off, as a chat app whose own window holds
   the last turns sends it, and as bench/context.py's `context` variant. /query: `query_sync` (default mode,
   top_k 40, filtered to the conversation), the results' texts in rank order until one does not fit the budget
   (as bench/metrics.py and bench/context.py cut).
3. Scoring. A question's score is the share of its evidence messages present in the text. A message is present
   when one of its *signature sentences* is inside the text, both with whitespace folded (runs of whitespace,
   line breaks included, become one space). Sentences: the content is split at line breaks and after `.`, `!`
   or `?` followed by whitespace; each piece is folded; those of 40+ characters that no other message of the
   chat holds (as a substring, folded) are the message's signature. A message with no such sentence (BEAM
   repeats a few messages nearly verbatim) is present when its whole folded content is inside the text. A
   summary that keeps a sentence verbatim counts; a paraphrase, or a sentence cut between two chunks, does not.
Per type (BEAM's keys) and overall (mean over questions), per budget, /context and /query; also the share per
speaker of the evidence message, the ceiling (evidence in /query's whole top 40), where in the block the evidence
was found (section), tokens per section, and ingest time per chat. Results: the `beam`
section of bench/RESULTS.md; every number in bench/out/beam.json.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench import common
from bench.cache import CachingEmbedder
from bench.meters import CountingEmbedder
from datastore.context.policy import DEFAULT_POLICY, BlockPolicy
from datastore.factory import open_memory
from datastore.memory import Memory
from models.api import Message, Query, QueryFilter, RememberRequest
from models.context import ContextRequest, ContextResponse
from services.embedding import Embedder, LocalEmbedder
from services.summarising import ExtractiveSummariser
from services.tokens import count_tokens

BUDGETS = (250, 500, 1000, 2000)
DEFAULT_CHATS = "11-20"
HELD_OUT_CHATS = "1-10"
"""BEAM 100K's other chats: never tuned on; a change kept on the development set is checked here before it lands."""
TOP_K = 40
NS = "bench"
MIN_SENTENCE = 40
TYPES = (
    "contradiction_resolution",
    "event_ordering",
    "information_extraction",
    "instruction_following",
    "knowledge_update",
    "multi_session_reasoning",
    "preference_following",
    "summarization",
    "temporal_reasoning",
)
VARIANTS = ("context", "query")
DIR = common.OUT / "beam"
MAX_MESSAGE_CHARS = 400_000
"""The stores' MAX_MESSAGE_CHARS: BEAM 100K chats 4 and 5 hold a pasted document of 349k and 53k characters in one
message (the default, 32,000, refuses it: a 422 naming `messages[i].content`; a user with such messages raises the
setting)."""
OUT_JSON = common.OUT / "beam.json"
MAX_MEMORY_CHARS = ContextRequest.model_fields["max_memory_chars"].default  # /context cuts a longer memory
_MARKER = re.compile(r"\s*->->[\d\s,)]*$")
_SPLIT = re.compile(r"(?<=[.!?])\s+|\n")
_HEADING = re.compile(r"^## (.+)$", re.M)


@dataclass(frozen=True)
class BeamQuestion:
    """A probing question: its BEAM type key, text, and evidence message ids (strings, in BEAM's order)."""

    type: str
    text: str
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class Chat:
    """One BEAM chat: `sessions` (one Message list per batch, time order) and its scorable questions."""

    number: int
    sessions: list[list[Message]]
    questions: list[BeamQuestion]

    @property
    def conversation_id(self) -> str:
        return f"beam-{self.number}"

    @property
    def messages(self) -> list[Message]:
        return [m for s in self.sessions for m in s]


# ---------------------------------------------------------------- reading BEAM


def chats_folder(data: Path) -> Path:
    """The folder holding `<n>/chat.json`: `data` itself, or `data/chats/100K` (the repository root), or
    `data/100K` (its chats folder). Raises FileNotFoundError naming `data` when none has a chat."""
    for candidate in (data, data / "chats" / "100K", data / "100K"):
        if any(candidate.glob("*/chat.json")):
            return candidate
    raise FileNotFoundError(f"no BEAM chats (<n>/chat.json) under {data}: give the repository root or chats/100K")


def parse_chats(spec: str) -> list[int]:
    """'11-20' -> [11..20]; '1,3,5-7' -> [1, 3, 5, 6, 7] (sorted, each once)."""
    out: set[int] = set()
    for part in spec.split(","):
        lo, _, hi = part.strip().partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return sorted(out)


def clean(content: str) -> str:
    """A message's content without BEAM's trailing annotation marker (`->-> 1,2`)."""
    return _MARKER.sub("", content)


def anchor_time(anchor: str) -> datetime:
    """'March-15-2024' -> 2024-03-15 12:00 UTC."""
    return datetime.strptime(anchor, "%B-%d-%Y").replace(hour=12, tzinfo=UTC)


def flatten_ids(value: object) -> list[str]:
    """source_chat_ids (an int, a list, or a dict of lists, nested) -> ids as strings, first occurrence first."""
    out: dict[str, None] = {}

    def walk(v: object) -> None:
        if isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif v is not None:
            out[str(v)] = None

    walk(value)
    return list(out)


def load_chat(folder: Path, number: int) -> Chat:
    """Chat `number` from `folder/<number>/` as sessions of Messages and questions (see the module doc, 1-2).

    Raises ValueError when a question names a message id the chat does not hold."""
    batches = json.loads((folder / str(number) / "chat.json").read_text())
    sessions: list[list[Message]] = []
    when: datetime | None = None
    for batch in batches:
        msgs = []
        for m in (m for exchange in batch["turns"] for m in exchange):
            step = when + timedelta(seconds=1) if when else None
            anchor = anchor_time(m["time_anchor"]) if m.get("time_anchor") else None
            when = max(anchor, step) if anchor and step else anchor or step
            msgs.append(
                Message(
                    id=str(m["id"]),
                    speaker=m["role"],
                    content=clean(m["content"]),
                    created_at=when,
                    session_id=f"batch-{batch['batch_number']}",
                )
            )
        if msgs:
            sessions.append(msgs)
    ids = {m.id for s in sessions for m in s}
    probing = json.loads((folder / str(number) / "probing_questions" / "probing_questions.json").read_text())
    questions = []
    for kind, items in probing.items():
        for q in items:
            evidence = tuple(flatten_ids(q.get("source_chat_ids")))
            if not evidence:
                continue  # abstention: nothing to find
            missing = [e for e in evidence if e not in ids]
            if missing:
                raise ValueError(f"chat {number}: {kind} question names unknown message ids {missing}")
            questions.append(BeamQuestion(kind, q["question"], evidence))
    return Chat(number, sessions, questions)


# ---------------------------------------------------------------- scoring


def fold(text: str) -> str:
    """Whitespace runs (line breaks included) -> one space, ends stripped."""
    return " ".join(text.split())


def sentences(content: str) -> list[str]:
    """The content's sentences, folded, of MIN_SENTENCE+ characters: split at line breaks and after `.`, `!`,
    `?` followed by whitespace."""
    return [s for s in (fold(p) for p in _SPLIT.split(content)) if len(s) >= MIN_SENTENCE]


def unique_sentences(contents: dict[str, str]) -> dict[str, tuple[str, ...]]:
    """message id -> its sentences (see `sentences`) that no other message holds (as a substring, folded);
    possibly none. `contents`: message id -> content."""
    folded = {i: fold(c) for i, c in contents.items()}
    everything = "\x00".join(folded.values())  # one haystack: a sentence is unique when all its hits are its own
    return {
        i: tuple(s for s in dict.fromkeys(sentences(c)) if everything.count(s) == folded[i].count(s))
        for i, c in contents.items()
    }


def signatures(contents: dict[str, str]) -> dict[str, tuple[str, ...]]:
    """message id -> the folded strings that show it is present: its unique sentences, else (none) its whole
    folded content. `contents`: message id -> content."""
    return {i: s or (fold(contents[i]),) for i, s in unique_sentences(contents).items()}


def present(folded_text: str, signature: Iterable[str]) -> bool:
    """Whether any signature string is inside `folded_text` (already folded)."""
    return any(s in folded_text for s in signature)


def present_flags(text: str, evidence: Sequence[str], sigs: dict[str, tuple[str, ...]]) -> list[int]:
    """1 or 0 per `evidence` message id: whether it is present in `text` (folded here)."""
    folded = fold(text)
    return [int(present(folded, sigs[e])) for e in evidence]


def evidence_share(text: str, evidence: Sequence[str], sigs: dict[str, tuple[str, ...]]) -> float:
    """Share (0-1) of the `evidence` message ids present in `text` (folded here)."""
    flags = present_flags(text, evidence, sigs)
    return sum(flags) / len(flags)


def block_sections(block: str) -> dict[str, str]:
    """A /context block split at its `## Heading` lines: heading -> that section's text ('' -> the frame)."""
    parts = _HEADING.split(block)
    out = {"": parts[0]}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        out[name] = body
    return out


def cut_texts(results: Sequence[tuple[str, int]], budget: int) -> list[str]:
    """The texts of `(text, tokens)` results in rank order until one would take the total past `budget`."""
    kept, used = [], 0
    for text, tokens in results:
        if used + tokens > budget:
            break
        kept.append(text)
        used += tokens
    return kept


# ---------------------------------------------------------------- the store calls (all of them are here)


def open_chat_store(number: int, embedder: Embedder, folder: Path = DIR, reuse: bool = False) -> Memory:
    """A fresh tree store (default settings) at `folder`/chat-<n>.db (by default under bench/out/beam); with
    `reuse`, the store a run left there (when there is one)."""
    folder.mkdir(parents=True, exist_ok=True)
    settings = common.bench_settings(folder / f"chat-{number}.db", max_message_chars=MAX_MESSAGE_CHARS)
    if reuse and settings.local_db_path.exists():
        return open_memory(settings, embedder, ExtractiveSummariser())
    return common.open_store(settings, embedder)


def remember(memory: Memory, chat: Chat) -> dict[str, int]:
    """Remember the chat, one call per session (batch); returns the store's counts (sources, messages, L1...)."""
    for session in chat.sessions:
        memory.writer.remember(NS, RememberRequest(conversation_id=chat.conversation_id, messages=session))
    return memory.storage.counts(NS)


def ask_context(memory: Memory, chat: Chat, question: str, budget: int, now: datetime) -> ContextResponse:
    """The /context block for `question` at `budget` tokens, recent turns off, this conversation only."""
    return memory.context.assemble(
        NS,
        ContextRequest(
            conversation_id=chat.conversation_id,
            query=question,
            budget_tokens=budget,
            now=now,
            all_conversations=False,
            recent=False,
        ),
    )


def ask_query(memory: Memory, chat: Chat, question: str) -> list[tuple[str, int]]:
    """/query (default mode, top TOP_K, this conversation): `(text, level)` in rank order."""
    res = memory.reader.query(
        NS, [Query(query=question, top_k=TOP_K, filter=QueryFilter(conversation_id=chat.conversation_id))]
    )
    return [(r.text, r.level) for r in res.results[0].results]


# ---------------------------------------------------------------- the run


class _Counting(CountingEmbedder):
    """CountingEmbedder that passes on the inner `runtime`, so the cache keys match the other benchmarks'."""

    def __init__(self, inner: LocalEmbedder) -> None:
        super().__init__(inner)
        self.runtime = inner.runtime


def run_chat(
    chat: Chat,
    embedder: Embedder,
    counter: CountingEmbedder,
    budgets: Sequence[int],
    folder: Path = DIR,
    reuse: bool = False,
    policy: BlockPolicy = DEFAULT_POLICY,
) -> dict:
    """Ingest one chat into a fresh store in `folder` and score its questions. `embedder` embeds (through the
    cache in a run); `counter` is the CountingEmbedder under it, read for the embedding work. `reuse`: ask the
    store an earlier run left in `folder` when it holds the chat's messages (no ingest; a quicker loop while
    changing how the block is assembled, never for reported numbers after a change to what is stored). `policy`: the
    block's tuned numbers (`--policy`; datastore/context/policy.py).

    Returns {"ingest": {messages, sessions, tokens, ingest_s, embedded_texts, embed_s, store, ...},
    "questions": [one dict per question: chat, type, n_evidence, scores {variant: {budget: share}},
    query_top_k (the share in all TOP_K results, uncut), found_in {budget: {section: messages}},
    section_tokens {budget: {section: tokens}}, context_items {budget: {section: [node ids]}},
    query_levels {budget: {level: items}}, truncated_items {budget: items}]}."""
    contents = {str(m.id): m.content for m in chat.messages}
    roles = {str(m.id): m.speaker or "" for m in chat.messages}
    unique = unique_sentences(contents)
    sigs = {i: s or (fold(contents[i]),) for i, s in unique.items()}  # as signatures(), without a second pass
    memory = open_chat_store(chat.number, embedder, folder, reuse)
    memory.context.policy = policy
    embedded, embed_s = counter.texts, counter.seconds
    t0 = time.perf_counter()
    held = memory.storage.counts(NS).get("messages", 0) if reuse else 0
    counts = memory.storage.counts(NS) if held == len(contents) else remember(memory, chat)
    ingest = {
        "messages": len(contents),
        "sessions": len(chat.sessions),
        "tokens": sum(count_tokens(c) for c in contents.values()),
        "ingest_s": round(time.perf_counter() - t0, 1),
        "embedded_texts": counter.texts - embedded,
        "embed_s": round(counter.seconds - embed_s, 1),
        "store": counts,
        "questions": len(chat.questions),
        "messages_without_unique_sentence": sum(not s for s in unique.values()),
        "evidence_without_unique_sentence": sum(not unique[e] for q in chat.questions for e in q.evidence),
    }
    now = max(m.created_at for m in chat.messages if m.created_at) + timedelta(minutes=1)
    embedder.embed([q.text for q in chat.questions])
    token_cache: dict[str, int] = {}
    out = []
    for q in chat.questions:
        ranked = ask_query(memory, chat, q.text)
        for text, _ in ranked:
            if text not in token_cache:
                token_cache[text] = count_tokens(text)
        record: dict = {
            "chat": chat.number,
            "type": q.type,
            "n_evidence": len(q.evidence),
            "roles": [roles[e] for e in q.evidence],
            "present": {v: {} for v in VARIANTS},
            "scores": {v: {} for v in VARIANTS},
            "found_in": {},
            "section_tokens": {},
            "query_levels": {},
            "truncated_items": {},
            "context_items": {},
            "query_top_k": evidence_share("\n".join(t for t, _ in ranked), q.evidence, sigs),
        }
        for b in budgets:
            kept = cut_texts([(t, token_cache[t]) for t, _ in ranked], b)
            ctx = ask_context(memory, chat, q.text, b, now)
            assert ctx.tokens_used <= b, (ctx.tokens_used, b)
            for variant, shown in (("query", "\n".join(kept)), ("context", ctx.context)):
                flags = present_flags(shown, q.evidence, sigs)
                record["present"][variant][b] = flags
                record["scores"][variant][b] = sum(flags) / len(flags)
            record["query_levels"][b] = dict(Counter(f"L{lvl}" for _, lvl in ranked[: len(kept)]))
            record["section_tokens"][b] = {s.name: s.tokens_used for s in ctx.sections if s.tokens_used}
            record["context_items"][b] = {s.name: [i.id for i in s.items] for s in ctx.sections if s.items}
            record["truncated_items"][b] = sum(len(i.text) > MAX_MEMORY_CHARS for s in ctx.sections for i in s.items)
            parts = {name: fold(text) for name, text in block_sections(ctx.context).items()}
            found: Counter[str] = Counter()
            for e in q.evidence:
                for name, text in parts.items():
                    if present(text, sigs[e]):
                        found[name or "frame"] += 1
            record["found_in"][b] = dict(found)
        out.append(record)
    memory.close()
    return {"ingest": ingest, "questions": out}


def summarise(questions: list[dict], budgets: Sequence[int]) -> dict:
    """Means over questions: {"scores": {variant: {group: {budget: share}}}} with group "all" and each type,
    "n_questions" / "n_evidence" per type, "by_role" {variant: {speaker: {budget: share of the evidence messages
    of that speaker present}}}, mean section tokens and found-in-section counts per budget."""
    types = [t for t in TYPES if any(q["type"] == t for q in questions)]
    types += sorted({q["type"] for q in questions} - set(types))
    scores: dict = {v: {} for v in VARIANTS}
    for v in VARIANTS:
        for group in ("all", *types):
            qs = [q for q in questions if group in ("all", q["type"])]
            scores[v][group] = {b: round(sum(q["scores"][v][b] for q in qs) / len(qs), 4) for b in budgets}
    top_k = {
        g: round(
            sum(q["query_top_k"] for q in questions if g in ("all", q["type"]))
            / sum(g in ("all", q["type"]) for q in questions),
            4,
        )
        for g in ("all", *types)
    }
    by_role: dict = {v: {} for v in VARIANTS}  # share of evidence messages present, per speaker of the message
    for v in VARIANTS:
        for role in sorted({r for q in questions for r in q["roles"]}):
            flags = {
                b: [f for q in questions for f, r in zip(q["present"][v][b], q["roles"], strict=True) if r == role]
                for b in budgets
            }
            by_role[v][role] = {b: round(sum(fs) / len(fs), 4) for b, fs in flags.items()}
    tokens: dict = {}
    found: dict = {}
    levels: dict = {}
    for b in budgets:
        t: Counter[str] = Counter()
        f: Counter[str] = Counter()
        lv: Counter[str] = Counter()
        for q in questions:
            t.update(q["section_tokens"][b])
            f.update(q["found_in"][b])
            lv.update(q["query_levels"][b])
        tokens[b] = {k: round(n / len(questions)) for k, n in t.items()}
        found[b] = dict(f)
        levels[b] = {k: round(n / len(questions), 2) for k, n in sorted(lv.items())}
    return {
        "n_questions": len(questions),
        "n_per_type": {t: sum(q["type"] == t for q in questions) for t in types},
        "n_evidence_per_type": {t: sum(q["n_evidence"] for q in questions if q["type"] == t) for t in types},
        "scores": scores,
        "query_top_k": top_k,
        "evidence_messages_per_role": dict(Counter(r for q in questions for r in q["roles"])),
        "by_role": by_role,
        "context_mean_section_tokens": tokens,
        "context_evidence_found_in_section": found,
        "query_mean_items_per_level": levels,
        "context_truncated_items": {b: sum(q["truncated_items"][b] for q in questions) for b in budgets},
    }


def markdown(results: dict, command: str) -> str:
    """The RESULTS.md section: provenance, the evidence table (/context vs /query per type and budget), ingest."""
    s = results["summary"]
    budgets = results["budgets"]
    lines = [
        "## Context block on BEAM" + (", held-out chats" if results["chats_spec"] == HELD_OUT_CHATS else ""),
        "",
        common.header(command),
        f"Evidence share: the fraction of a question's evidence messages (`source_chat_ids`) present in the text "
        f"(one of their unique sentences of {MIN_SENTENCE}+ characters verbatim, whitespace folded; see "
        f"bench/beam.py), BEAM 100K chats {results['chats_spec']}, {s['n_questions']} questions (abstention "
        f"skipped). Each cell: `/context` (recent turns off) / `/query` (top {TOP_K}, cut at the budget).",
        "",
        "| type (questions, evidence messages) | " + " | ".join(f"@{b}" for b in budgets) + " |",
        "| --- " * (1 + len(budgets)) + "|",
    ]
    sc = s["scores"]
    for group in sc["context"]:
        label = (
            f"**overall** ({s['n_questions']}, {sum(s['n_evidence_per_type'].values())})"
            if group == "all"
            else f"{group} ({s['n_per_type'][group]}, {s['n_evidence_per_type'][group]})"
        )
        cells = [f"{sc['context'][group][b]:.3f} / {sc['query'][group][b]:.3f}" for b in budgets]
        if group == "all":
            cells = [f"**{c}**" for c in cells]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Ceiling: /query's whole top {TOP_K}, uncut, holds {s['query_top_k']['all']:.3f} of the evidence ("
        + ", ".join(f"{k} {v:.2f}" for k, v in s["query_top_k"].items() if k != "all")
        + ").",
        "",
        "By who wrote the evidence message: the share of those messages present (all questions pooled), "
        "/context / /query:",
        "",
        "| speaker (evidence messages) | " + " | ".join(f"@{b}" for b in budgets) + " |",
        "| --- " * (1 + len(budgets)) + "|",
    ]
    for role, n in s["evidence_messages_per_role"].items():
        ctx, qry = s["by_role"]["context"][role], s["by_role"]["query"][role]
        lines.append(f"| {role} ({n}) | " + " | ".join(f"{ctx[b]:.3f} / {qry[b]:.3f}" for b in budgets) + " |")
    lines += [
        "",
        "Where /context found the evidence (messages, summed over questions) and its mean tokens per section:",
        "",
    ]
    for b in budgets:
        lines.append(
            f"- @{b}: found in "
            + (", ".join(f"{k} {n}" for k, n in s["context_evidence_found_in_section"][b].items()) or "none")
            + "; tokens "
            + ", ".join(f"{k} {n}" for k, n in s["context_mean_section_tokens"][b].items())
            + "; /query items "
            + ", ".join(f"{k} {n}" for k, n in s["query_mean_items_per_level"][b].items())
        )
    lines += ["", "| chat | messages | tokens | store | ingest s | embedded texts (s) |", "| --- " * 6 + "|"]
    for n, c in results["chats"].items():
        store = ", ".join(f"{k} {v}" for k, v in c["store"].items() if k.startswith("L"))
        lines.append(
            f"| {n} | {c['messages']} | {c['tokens']:,} | {store} | {c['ingest_s']} | "
            f"{c['embedded_texts']} ({c['embed_s']}) |"
        )
    lines += [
        "",
        f"- questions asked in {results['questions_s']} s ({len(budgets)} /context calls and one /query per question)",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.beam", description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="BEAM repository root, or its chats/100K folder")
    parser.add_argument("--chats", default=DEFAULT_CHATS, help="chat numbers, e.g. 11-20 or 1,3,5-7")
    parser.add_argument("--budgets", default=",".join(map(str, BUDGETS)), help="token budgets, comma-separated")
    parser.add_argument("--out", type=Path, default=OUT_JSON, help="where the JSON of every number goes")
    parser.add_argument("--types", default="", help="only these question types, comma-separated (a quick loop)")
    parser.add_argument(
        "--reuse", action="store_true", help="ask the stores an earlier run left in bench/out/beam (no ingest)"
    )
    parser.add_argument("--policy", default="", help="BlockPolicy fields to change, e.g. thread_weight=0.7")
    common.datastore_argument(parser)
    args = parser.parse_args(argv)
    args.block_policy = parse_policy(args.policy)
    with common.datastore(args.datastore):
        _run(args)


def parse_policy(spec: str) -> BlockPolicy:
    """DEFAULT_POLICY with the fields of `spec` changed (`name=number,name=number`); raises SystemExit naming a
    field BlockPolicy does not have or a value that is not a number."""
    changes: dict[str, float | int] = {}
    known = {f.name: f.type for f in fields(BlockPolicy)}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, value = part.partition("=")
        if known.get(name) not in ("int", "float"):
            raise SystemExit(f"--policy: {name!r} is not a numeric BlockPolicy field")
        try:
            changes[name] = int(value) if known[name] == "int" else float(value)
        except ValueError:
            raise SystemExit(f"--policy: {name}={value!r} is not a number") from None
    return replace(DEFAULT_POLICY, **changes)  # type: ignore[arg-type]


def _run(args: argparse.Namespace) -> None:
    """main's work on the provider of the enclosing `common.datastore` block."""
    types = {t for t in args.types.split(",") if t}
    folder = chats_folder(args.data)
    budgets = sorted({int(b) for b in args.budgets.split(",")})
    counter = _Counting(LocalEmbedder(threads=2))
    embedder = CachingEmbedder(counter, common.OUT / "embeddings.sqlite")
    results: dict = {
        "data": str(folder),
        "datastore": args.datastore,
        "chats_spec": args.chats,
        "budgets": budgets,
        "top_k": TOP_K,
        "chats": {},
    }
    questions: list[dict] = []
    t0 = time.perf_counter()
    for number in parse_chats(args.chats):
        chat = load_chat(folder, number)
        if types:
            chat = Chat(chat.number, chat.sessions, [q for q in chat.questions if q.type in types])
        done = run_chat(chat, embedder, counter, budgets, reuse=args.reuse, policy=args.block_policy)
        results["chats"][number] = done["ingest"]
        questions += done["questions"]
        print(f"chat {number}: {done['ingest']}", flush=True)
    embedder.release()
    ingest_s = sum(c["ingest_s"] for c in results["chats"].values())
    results["questions_s"] = round(time.perf_counter() - t0 - ingest_s, 1)
    results["summary"] = summarise(questions, budgets)
    results["questions"] = questions
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, default=str))
    command = f".venv/bin/python -m bench.beam --data {args.data}"
    command += "" if args.chats == DEFAULT_CHATS else f" --chats {args.chats}"
    command += "" if args.datastore == "local" else f" --datastore {args.datastore}"
    md = markdown(results, command)
    print(md, flush=True)
    default = args.block_policy == DEFAULT_POLICY
    sections = {DEFAULT_CHATS: "beam", HELD_OUT_CHATS: "beam-held-out"}
    if args.chats in sections and budgets == list(BUDGETS) and not types and not args.reuse and default:
        common.write_section(sections[args.chats] + ("" if args.datastore == "local" else f"-{args.datastore}"), md)
        print(f"wrote {common.RESULTS}")


if __name__ == "__main__":
    main()
