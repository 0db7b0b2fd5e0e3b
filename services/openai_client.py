"""The official OpenAI client, configured once from the settings, for the OpenAI embedder and summariser.

`openai` is the optional `openai` extra (`pip install 'pyramind[openai]'`): the offline default install has no use
for it. Works with any OpenAI-compatible server through OPENAI_BASE_URL.
"""

from __future__ import annotations

from typing import Any

from models.settings import Settings
from services.errors import PyramindError


class OpenAIMissingError(PyramindError):
    """The settings ask for OpenAI (EMBEDDER/SUMMARISER=openai, or OPENAI_API_KEY set) but the extra is missing."""

    code = "openai_missing"
    status = 500


def openai_client(settings: Settings, purpose: str) -> Any:
    """An `openai.OpenAI` client with the settings' key, base URL, timeout (s) and retries (the client's own
    backoff on 429/5xx and timeouts). purpose: what wants it, for the error, e.g. "EMBEDDER=openai".

    Raises OpenAIMissingError (one line naming the extra) when the `openai` package is not installed.
    """
    try:
        from openai import OpenAI
    except ImportError:
        raise OpenAIMissingError(  # from None: this line is the whole story (open_error prints a cause instead)
            f"{purpose} needs the openai extra, which is not installed: pip install 'pyramind[openai]' "
            "(or bash scripts/setup.sh openai)"
        ) from None
    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else "unset"
    return OpenAI(
        api_key=key,
        base_url=settings.openai_base_url,
        timeout=settings.openai_timeout,
        max_retries=settings.openai_max_retries,
    )
