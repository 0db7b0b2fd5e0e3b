"""Cut an answer to a size a client accepts (GPT Actions take at most 100,000 characters): MAX_RESPONSE_CHARS.

Results are dropped from the end of the longest list (the lowest ranked first) until the JSON fits, and the
answer says `truncated: true`. Sizes are measured on `json.dumps` with its default separators, a little more
than what the server sends, so the sent answer is never larger than the cap.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from models.api import QueryResponse
from models.find import FindResponse

M = TypeVar("M", bound=BaseModel)


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False))


def fit(response: M, cap: int, lists: Callable[[dict[str, Any]], list[list[Any]]]) -> M:
    """`response` unchanged when its JSON fits in `cap` characters, else a copy with items dropped from the end of
    the longest of `lists(dumped)` until it fits, and `truncated` set."""
    data = response.model_dump(mode="json")
    size = _size(data)
    if size <= cap:
        return response
    data["truncated"] = True
    while size > cap:
        candidates = [items for items in lists(data) if items]
        if not candidates:
            break
        longest = max(candidates, key=len)
        size -= _size(longest.pop()) + 2
        if size <= cap:
            size = _size(data)
    return type(response).model_validate(data)


def fit_query(response: QueryResponse, cap: int) -> QueryResponse:
    return fit(response, cap, lambda d: [r["results"] for r in d["results"]])


def fit_find(response: FindResponse, cap: int) -> FindResponse:
    return fit(response, cap, lambda d: [d["matches"]])
