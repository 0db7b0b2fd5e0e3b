"""Picks and opens the Storage the settings ask for, and composes the Memory over it; a provider's SDK is
imported only when it is chosen."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from datastore.memory import Memory
from datastore.storage import Storage
from models.settings import Settings
from services.embedding import Embedder, make_embedder
from services.errors import StoreError
from services.instructions import Detector, make_detector
from services.summarising import Summariser, make_summariser


def open_storage(settings: Settings, dimension: int) -> Storage:
    """The provider DATASTORE names, else pinecone when PINECONE_API_KEY is set, else the local SQLite store,
    opened. dimension: the embedder's (a provider sizes its vector column or index by it).

    Raises StoreError for a provider that is not installed or cannot be opened (naming the setting).
    """
    choice = settings.resolved_datastore
    if choice == "local":
        from datastore.providers.local import LocalStorage

        return LocalStorage(settings, dimension)
    if choice == "postgres":
        try:
            from datastore.providers.postgres import PostgresStorage
        except ImportError as exc:
            raise StoreError(f"DATASTORE=postgres needs: pip install 'pyramind[postgres]' ({exc})") from exc

        return PostgresStorage(settings, dimension)
    if choice == "pinecone":
        try:
            from datastore.providers.pinecone import PineconeStorage
        except ImportError as exc:
            raise StoreError(f"DATASTORE=pinecone needs: pip install 'pyramind[pinecone]' ({exc})") from exc

        return PineconeStorage(settings, dimension)
    raise StoreError(f"DATASTORE={choice} is not a known provider; use local, postgres or pinecone")


def open_memory(
    settings: Settings,
    embedder: Embedder | None = None,
    summariser: Summariser | None = None,
    detector: Detector | None = None,
) -> Memory:
    """The Memory over the configured, opened Storage (see `open_storage`).

    embedder/summariser/detector default to what the settings choose (tests pass shared instances; the
    instruction detector is the LLM one when the summariser is openai, else the offline rules plus the classifier,
    which reads the embedder's vectors when it is the local MiniLM). Raises
    StoreError for a provider that is not available, EmbeddingMismatchError when the store holds another model's
    vectors, OpenAIMissingError when openai is chosen but not installed.
    """
    embedder = embedder or make_embedder(settings)
    summariser = summariser or make_summariser(settings)
    detector = detector or make_detector(settings, embedder)
    return Memory(settings, open_storage(settings, embedder.dimension), embedder, summariser, detector)


def store_location(settings: Settings) -> str:
    """Where the configured store lives, for start-up lines and errors; never a secret.

    local: the SQLite file's absolute path; postgres: POSTGRES_URL without its password; pinecone: the index
    (and its host when set).
    """
    choice = settings.resolved_datastore
    if choice == "local":
        return f"local SQLite file {settings.local_db_path.expanduser().resolve()}"
    if choice == "postgres":
        if settings.postgres_url is None:
            return "postgres (POSTGRES_URL unset)"
        try:
            url = urlsplit(settings.postgres_url.get_secret_value())
            host = url.hostname or ""
            netloc = (f"{url.username}@" if url.username else "") + host + (f":{url.port}" if url.port else "")
            return "postgres " + urlunsplit((url.scheme, netloc, url.path, "", ""))
        except ValueError:
            return "postgres (POSTGRES_URL)"
    host = f" at {settings.pinecone_host}" if settings.pinecone_host else ""
    return f"pinecone index {settings.pinecone_index}{host}"
