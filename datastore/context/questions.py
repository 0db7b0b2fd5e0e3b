"""What a question asks: about the course of things (`asks_overview`) and its topic (`overview_topic`, from the
part that asks, `asking_part`), or what the user said (`asks_what_user_said`). English cue words, read by the
block's inputs (datastore/context/inputs.py) and its timeline (datastore/context/timeline.py)."""

from __future__ import annotations

import re

from services.text import sentence_spans

_OVERVIEW = re.compile(
    r"\b(in (what|which) order|the order (in which|of|that)|(chronological|reverse|right|correct) order|sequence|"
    r"chronolog\w*|timeline|summar\w*|overview|recap|progress(ed|es|ing)|(what|how much) progress|evolv\w*|"
    r"over time|so far|"
    r"history|walk me through|step by step|first\w* .{0,40}\bthen|how .{0,30}\b(changed|developed|went)|"
    r"how many (different|distinct|unique|separate|kinds|types)|brought up|"
    r"how many\b.{0,60}\b(did|have) I (ever )?mention\w*|"
    r"across (all )?(of )?((our|my|the|these) )?(conversations|sessions|chats|discussions|messages|talks))\b",
    re.I,
)
_ASKED_BY_USER = re.compile(
    r"\bI(\s+have|'ve|\s+had|'d)?\s+(first\s+|ever\s+|originally\s+)?(brought up|bring up|mentioned|mention|raised|"
    r"asked|ask|said|say|told|talked about|shared|noted|described|discussed|wanted|planned)\b",
    re.I,
)
# the words of a question about the course of things that name no topic: left out of the query the lines are
# ranked for ("walk me through the order in which I brought up X across our conversations" ranks them for X)
_COURSE_WORDS = re.compile(
    r"\b(can|could|would|will) you\b|\bplease\b|\bwalk me through\b|\bgive me\b|\btell me\b|"
    r"\b(comprehensive|complete|brief|detailed|short|full|quick)\b|\b(summary|summari[sz]e|overview|recap)( of)?\b|"
    r"\b(in )?(the |what |which )?(order|sequence)( in which)?\b|\bin order\b|"
    r"\b(across|throughout|during|over|in|from|based on) (all )?(of )?((our|my|the|these) )?"
    r"((recent|past|previous|earlier|many) )?(conversations|sessions|chats|discussions|messages|talks)\b|"
    r"\bover the (past|last) (few |several |couple of )?(days|weeks|months|years)\b|"
    r"\b(has|have|had)( been)? (developed|evolved|changed|progressed)( and (developed|evolved|changed))?\b|"
    r"\bbrought up\b|\bmentioned\b|\bso far\b|\bover time\b|"
    r"\bdifferent\b|\bhow many\b|\bwe('ve| have)? (discussed|talked about|covered)\b",
    re.I,
)
_LEFT_OVER = re.compile(r"^((a|an|the|list|and)\s+)+", re.I)  # what a request's removed words leave in front


def asking_part(query: str) -> str:
    """The part of a query that asks: its text up to the end of its last sentence that asks (one ending in "?",
    or one asking about the course of things, `asks_overview`). The sentences after it say how to answer
    ("Keep it short.", "Just the titles, please.", "Use a list."), not what about; the whole query when no
    sentence asks. A topic said after the question ("What did I plan? The trip to Rome.") is left out too."""
    ends = [b for a, b in sentence_spans(query) if query[a:b].endswith("?") or asks_overview(query[a:b])]
    return query[: ends[-1]] if ends else query


def overview_topic(query: str) -> str:
    """The topic of a question about the course of things: the part that asks (`asking_part`) without the words
    that ask for an order, a summary or a count (_COURSE_WORDS); the question itself when little is left."""
    topic = " ".join(_COURSE_WORDS.sub(" ", asking_part(query)).split()).strip(" ,.?!")
    topic = _LEFT_OVER.sub("", topic)
    return topic if len(topic) >= 12 else query


def asks_what_user_said(query: str) -> bool:
    """Whether a question asks what the user (the asker) said, brought up or mentioned ("in what order did I
    bring up...", "how many ... have I mentioned"): the people's lines answer it, not the assistant's."""
    return _ASKED_BY_USER.search(query) is not None


def asks_overview(query: str) -> bool:
    """Whether a question asks about the course of things rather than a fact: the order things came up in, a
    summary, the progress or history of something ("in what order did I...", "summarise how my project went"), a
    count over the conversation ("how many different...", "across our conversations"). English cue words; a
    question without them gets the relevant memories first. "order" counts only as a sequence ("in which order",
    not "What did I order?"), "progress" only as a verb or "what progress" (not "my son's progress in maths"):
    bench/overview.py (a frozen test set of 40 everyday questions: precision 0.655 -> 0.900, recall 0.950 ->
    0.900; RESULTS "stop9-notes")."""
    return _OVERVIEW.search(query) is not None
