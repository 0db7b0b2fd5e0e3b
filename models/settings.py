"""One settings object, read once from the environment (and `.env`) by `Settings()`.

Every field is documented in `.env.example` and the README's configuration table (a test checks both).
Nothing reads the environment at import time: the app factory, the CLI and the tests build a `Settings`
and pass it down. Secrets are `SecretStr`, so they never appear in a `repr` or a log line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from models.api import RetrievalMode

# RFC 7518 §3.2: an HMAC key must be at least as long as the hash output.
JWT_HMAC_MIN_BYTES = {"HS256": 32, "HS384": 48, "HS512": 64}
JWT_PUBLIC_KEY_ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512")
JWT_ACCEPTED_ALGORITHMS = (*JWT_HMAC_MIN_BYTES, *JWT_PUBLIC_KEY_ALGORITHMS)


class Settings(BaseSettings):
    """Pyramind's configuration; raises pydantic.ValidationError naming the key on a bad value."""

    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore")

    # Storage
    datastore: Literal["local", "postgres", "pinecone"] | None = Field(
        default=None, description="Storage provider; default pinecone when PINECONE_API_KEY is set, else local."
    )
    local_db_path: Path = Field(default=Path("pyramind.db"), description="SQLite file of the local store.")
    pinecone_api_key: SecretStr | None = Field(default=None, description="Pinecone API key.")
    postgres_url: SecretStr | None = Field(
        default=None, description="PostgreSQL URL of the postgres store (postgresql://user:pw@host/db)."
    )
    pg_pool_size: int = Field(default=5, ge=1, le=100, description="Most connections of the postgres store.")
    pinecone_index: str = Field(default="pyramind", description="Pinecone index name (created when missing).")
    pinecone_host: str | None = Field(
        default=None, description="Data-plane host of the Pinecone index; skips the lookup (an emulator)."
    )
    pinecone_cloud: str = Field(default="aws", description="Cloud of a Pinecone serverless index made here.")
    pinecone_region: str = Field(default="us-east-1", description="Region of a Pinecone serverless index created here.")

    # Chunking and the tree
    chunk_size: int = Field(default=200, ge=16, le=8192, description="Max tokens (cl100k_base) of an L1 chunk.")
    chunk_overlap: int = Field(
        default=20, ge=0, description="At most this many tokens of whole sentences shared by consecutive L1 chunks."
    )
    chunk_key_context_tokens: int = Field(
        default=80,
        ge=0,
        description="At most this many tokens of whole sentences before an L1 chunk are embedded with it (its "
        "retrieval key; the chunk's text stays as it is); 0 = off.",
    )
    fan_out: int = Field(default=5, ge=2, le=50, description="Sealed nodes of level n per node of level n+1.")
    max_level: int = Field(default=5, ge=1, le=12, description="Highest level of the tree (L1 = chunks).")
    summary_max_tokens: int = Field(default=200, ge=16, le=4096, description="Token cap of a summary.")
    visit_flush_seconds: float = Field(
        default=5.0, ge=0, description="Seconds between writes of the visits counted by queries; 0 = only at shutdown."
    )
    forget_max_nodes: int = Field(
        default=0, ge=0, description="Conversation L1 chunks a namespace may hold before forgetting; 0 = no limit."
    )
    forget_after_days: float = Field(
        default=0, ge=0, description="Forget unpinned conversation chunks older than this many days; 0 = never."
    )
    forget_fraction: float = Field(
        default=0.1, gt=0, le=1, description="Share of a namespace's chunks forgotten per step when over the limit."
    )
    forget_check_seconds: float = Field(
        default=3600, ge=0, description="Seconds between runs of the forgetting policy in the server; 0 = never."
    )
    session_gap_hours: float = Field(
        default=4.0, ge=0, description="Hours between two messages that start a new inferred session; 0 = never."
    )

    # Retrieval
    retrieval_mode: RetrievalMode = Field(
        default="hybrid", description="Default ranking of /query: hybrid, dense, text or tree (bench/RESULTS.md)."
    )

    # Context block (POST /context) and core memory (PUT /core)
    context_max_tokens: int = Field(
        default=8000, ge=100, le=128_000, description="Largest budget_tokens of a /context request (cl100k tokens)."
    )
    context_min_score: float = Field(
        default=0.2,
        ge=0,
        le=1,
        description="Relevance floor by words: a memory under the meaning floor needs this hybrid score to be shown in "
        "/context (its relevant memories and timeline) and in an outline's query.",
    )
    context_min_cosine: float = Field(
        default=0.35,
        ge=-1,
        le=1,
        description="Relevance floor by meaning: a memory whose cosine to the query reaches this is shown whatever "
        "words it shares (MiniLM scale).",
    )
    core_max_tokens: int = Field(
        default=500,
        ge=10,
        le=32_000,
        description="Token budget of core memory per namespace (and per conversation); overflow moves to long-term.",
    )

    ann_min_rows: int = Field(
        default=50_000,
        ge=0,
        description="Nodes in a namespace from which its in-memory vector search uses an IVF index (the ann extra: "
        "faiss); 0 = always exact.",
    )
    index_max_nodes: int = Field(
        default=1_000_000,
        ge=1_000,
        description="Most nodes the in-memory search indexes hold over every namespace (~3 KB each at 384 "
        "dimensions, and ~12 KB a node of a namespace while it loads from the store); past it the least recently "
        "searched namespaces are dropped.",
    )
    index_idle_seconds: float = Field(
        default=900.0,
        gt=0,
        description="Seconds after which a namespace's in-memory search index unused since is dropped.",
    )
    index_snapshot_dir: Path | None = Field(
        default=None,
        description="Folder (this server's alone) where namespace indexes are snapshotted, so a cold namespace is "
        "read back in one file after a restart or an eviction instead of indexed again; unset: none.",
    )
    index_snapshot_min_nodes: int = Field(
        default=500,
        ge=0,
        description="Nodes a namespace holds from which its index is snapshotted (INDEX_SNAPSHOT_DIR): below it "
        "reading a snapshot saves no measurable time over listing the store (bench/RESULTS.md, many users).",
    )

    index_preload_share: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="Share of INDEX_MAX_NODES a starting server fills, in the background, with the snapshotted "
        "indexes (INDEX_SNAPSHOT_DIR) of the namespaces used last, newest first, so their users find them warm; "
        "/health answers before it ends (a namespace not yet read back loads on its first request as without it); "
        "0 = off.",
    )

    # Embeddings
    embedder: Literal["local", "openai", "sentence-transformers"] | None = Field(
        default=None, description="Embedder; default openai when OPENAI_API_KEY is set, else local MiniLM (ONNX)."
    )
    embedding_model: str | None = Field(
        default=None,
        description="OpenAI embedding model (default text-embedding-3-small); with "
        "EMBEDDER=sentence-transformers, a local model folder (default all-MiniLM-L6-v2 from the torch extra).",
    )
    embedding_dimension: int | None = Field(
        default=None, ge=1, le=4096, description="Vector size for OpenAI embeddings (default 1536)."
    )
    embed_threads: int = Field(default=1, ge=1, le=64, description="CPU threads of the local embedder.")
    embed_workers: int = Field(
        default=2, ge=1, le=16, description="Local embedding runs side by side on one loaded model (one per core)."
    )
    embed_bulk_batch: int = Field(
        default=8,
        ge=1,
        le=256,
        description="Most texts per forward pass of background (bulk) embedding (and ~256 word pieces); a query "
        "waits for at most one such pass.",
    )
    embed_batch_size: int = Field(default=32, ge=1, le=2048, description="Texts per embedding call.")

    # Summaries
    summariser: Literal["extractive", "openai"] | None = Field(
        default=None, description="Summariser; default openai when OPENAI_API_KEY is set, else extractive."
    )
    summary_model: str = Field(default="gpt-4o-mini", description="OpenAI-compatible chat model for summaries.")
    instruction_model: str | None = Field(
        default=None,
        description="Chat model that finds standing instructions and preferences (SUMMARISER=openai); "
        "default SUMMARY_MODEL.",
    )
    instruction_detector: Literal["auto", "classifier", "pattern", "openai"] = Field(
        default="auto",
        description="What finds standing instructions: auto (the chat model when the summariser is openai, else "
        "the classifier), classifier (offline: the rules plus a classifier over the local MiniLM sentence "
        "vectors), pattern (the offline rules alone) or openai.",
    )

    # OpenAI or any OpenAI-compatible server
    openai_api_key: SecretStr | None = Field(default=None, description="OpenAI API key.")
    openai_base_url: str | None = Field(default=None, description="Base URL of an OpenAI-compatible server.")
    openai_timeout: float = Field(default=30.0, gt=0, description="Seconds per OpenAI request.")
    openai_max_retries: int = Field(default=3, ge=0, le=10, description="Retries of a failed OpenAI request.")

    # Server
    bearer_token: SecretStr | None = Field(default=None, description="Static bearer token of the API.")
    auth: Literal["bearer", "jwt", "none"] = Field(
        default="bearer", description="bearer (static token), jwt (verified tokens), or none (local_server)."
    )
    jwt_secret: SecretStr | None = Field(
        default=None, description="Shared secret of HS256/384/512 tokens: at least 32/48/64 bytes (RFC 7518 §3.2)."
    )
    jwt_public_key: str | None = Field(
        default=None, description="PEM public key (or a path to one) of RS256/ES256 tokens."
    )
    jwt_jwks_file: Path | None = Field(default=None, description="JWKS file of RS256/ES256 public keys.")
    jwt_algorithms: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Allowed algorithms (default HS256 with a secret, else RS256, ES256)."
    )
    jwt_audience: str | None = Field(default=None, description="Required `aud` claim.")
    jwt_issuer: str | None = Field(default=None, description="Required `iss` claim.")
    jwt_namespace_claim: str = Field(default="sub", description="Claim whose value is the caller's namespace.")
    jwt_read_namespaces_claim: str = Field(
        default="read_namespaces", description="Claim listing the namespaces a JWT caller may also read (never write)."
    )
    read_only_namespaces: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Namespaces a static-token (or AUTH=none) caller may read with `namespaces` but never write.",
    )
    jwt_leeway: int = Field(default=30, ge=0, le=600, description="Seconds of clock skew allowed on exp/nbf.")
    pending_retry_seconds: float = Field(
        default=30.0,
        ge=0,
        description="Seconds between scans of the store for unindexed messages (embedder failures, other "
        "processes); 0 = only at start.",
    )
    lease_seconds: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="Seconds a process's lease on a conversation lasts on a store without transactions (Pinecone); "
        "a crashed holder's lease is taken over after it.",
    )
    lease_settle_seconds: float = Field(
        default=0.05,
        ge=0,
        le=5,
        description="Seconds a process waits between writing its lease and reading it back (must exceed the "
        "store's read-to-write delay).",
    )
    index_chunk_batch: int = Field(
        default=16,
        ge=1,
        le=1024,
        description="Most L1 chunks the background indexer cuts and embeds for one source per step (fairness).",
    )
    index_summary_concurrency: int = Field(
        default=4, ge=1, le=64, description="Sources whose summaries the background indexer builds at once."
    )
    index_nice: int = Field(
        default=10, ge=0, le=19, description="CPU niceness of the background indexer's threads (0 = as requests)."
    )
    remember_wait_seconds: float = Field(
        default=30.0, gt=0, description="Longest a `wait: true` remember waits for indexing before answering 202."
    )
    max_pending_tokens: int = Field(
        default=200_000,
        ge=0,
        description="Unindexed tokens a namespace may have queued; above it remember answers 429; 0 = no cap.",
    )
    rate_limit_per_minute: int = Field(
        default=0, ge=0, description="Requests per minute per caller (token or namespace); 0 = no limit."
    )
    host: str = Field(default="127.0.0.1", description="Address the server binds.")
    port: int = Field(default=8000, ge=1, le=65535, description="Port the server binds.")
    public_url: str | None = Field(default=None, description="URL clients reach the server at (OpenAPI servers entry).")
    cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list, description="Origins allowed by CORS.")
    metrics_enabled: bool = Field(
        default=True, description="Serve GET /metrics (Prometheus text format), behind the same auth as the API."
    )

    # Limits on one request
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024, description="Largest request body.")
    max_messages: int = Field(default=1000, ge=1, description="Messages per remember call.")
    max_message_chars: int = Field(default=32_000, ge=1, description="Characters per message.")
    max_document_chars: int = Field(default=100_000, ge=1, description="Characters per document of an upsert.")
    max_documents: int = Field(default=100, ge=1, description="Documents per upsert call.")
    max_query_chars: int = Field(default=4000, ge=1, description="Characters per query text.")
    max_delete_ids: int = Field(default=1000, ge=1, description="Ids per delete call.")
    max_top_k: int = Field(default=100, ge=1, description="Largest top_k of a query.")
    max_queries: int = Field(default=20, ge=1, description="Queries per query call.")
    find_max_limit: int = Field(default=100, ge=1, le=10_000, description="Largest `limit` of a find call.")
    find_time_limit: float = Field(
        default=5.0, gt=0, le=300, description="Seconds a find call may scan before answering with what it found."
    )
    max_response_chars: int = Field(
        default=100_000,
        ge=1000,
        description="Largest JSON answer of /query and /find in characters (GPT Actions take 100,000); cut to fit.",
    )

    @field_validator("jwt_algorithms", "cors_origins", "read_only_namespaces", mode="before")
    @classmethod
    def _list(cls, value: Any) -> Any:
        """A list setting from the environment: a JSON array (`["HS256","RS256"]`) or comma-separated
        (`HS256,RS256`, `HS256`); blanks dropped."""
        if not isinstance(value, str):
            return value
        text = value.strip()
        if text.startswith("["):
            try:
                return json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f'not a JSON list ({exc.msg}); give a,b or ["a", "b"]') from None
        return [part.strip() for part in text.split(",") if part.strip()]

    @field_validator("jwt_algorithms")
    @classmethod
    def _algorithms(cls, value: list[str]) -> list[str]:
        """Only JWS signature algorithms python-jose verifies; never `none`."""
        for name in value:
            if name.lower() == "none":
                raise ValueError("'none' is never accepted (unsigned tokens)")
            if name not in JWT_ACCEPTED_ALGORITHMS:
                raise ValueError(
                    f"{name!r} is not accepted; accepted: {', '.join(JWT_ACCEPTED_ALGORITHMS)} "
                    "(comma-separated or a JSON list)"
                )
        return value

    @model_validator(mode="after")
    def _check(self) -> Settings:
        """Checks across keys; each message starts with the key it names (`KEY: what is wrong`)."""
        if self.chunk_overlap >= self.chunk_size // 2:
            raise ValueError("CHUNK_OVERLAP: must be less than half of CHUNK_SIZE")
        if self.auth == "bearer" and self.bearer_token is not None and not self.bearer_token.get_secret_value():
            raise ValueError("BEARER_TOKEN: must not be empty")
        if self.auth == "jwt":
            self._check_jwt()
        return self

    def _check_jwt(self) -> None:
        """With AUTH=jwt: one key, algorithms its kind of key can verify, a long enough secret, and a public key or
        JWKS that loads. A key that is missing altogether is reported when serving (`check_auth_settings`), so
        commands that never verify a token (import, query...) still run."""
        given = [
            name
            for name, value in (
                ("JWT_SECRET", self.jwt_secret),
                ("JWT_PUBLIC_KEY", self.jwt_public_key),
                ("JWT_JWKS_FILE", self.jwt_jwks_file),
            )
            if value
        ]
        if len(given) > 1:
            raise ValueError(
                f"{given[1]}: set only one of JWT_SECRET, JWT_PUBLIC_KEY and JWT_JWKS_FILE ({given[0]} is set too)"
            )
        if not given:
            return
        algorithms = self.resolved_jwt_algorithms
        hmac = [a for a in algorithms if a in JWT_HMAC_MIN_BYTES]
        if given[0] == "JWT_SECRET":
            other = [a for a in algorithms if a not in JWT_HMAC_MIN_BYTES]
            if other:
                raise ValueError(
                    f"JWT_ALGORITHMS: {other[0]} needs JWT_PUBLIC_KEY or JWT_JWKS_FILE; JWT_SECRET "
                    f"verifies only {', '.join(JWT_HMAC_MIN_BYTES)}"
                )
            assert self.jwt_secret is not None
            size = len(self.jwt_secret.get_secret_value().encode())
            strictest = max(hmac, key=JWT_HMAC_MIN_BYTES.__getitem__)
            if size < JWT_HMAC_MIN_BYTES[strictest]:
                raise ValueError(
                    f"JWT_SECRET: {size} byte{'' if size == 1 else 's'}; {strictest} needs at least "
                    f"{JWT_HMAC_MIN_BYTES[strictest]} (RFC 7518 §3.2: an HMAC key at least the hash size)"
                )
            return
        if hmac:
            raise ValueError(
                f"JWT_ALGORITHMS: {hmac[0]} needs JWT_SECRET; {given[0]} verifies only "
                f"{', '.join(JWT_PUBLIC_KEY_ALGORITHMS)}"
            )
        self.jwt_verification_key()

    def jwt_verification_key(self) -> str | dict[str, Any]:
        """The key tokens are verified with (AUTH=jwt): the JWKS file's content, the PEM public key (read from its
        file when JWT_PUBLIC_KEY is a path), or the secret. Raises ValueError naming the setting when the key cannot
        be read or is no key for the allowed algorithms."""
        algorithms = [a for a in self.resolved_jwt_algorithms if a in JWT_PUBLIC_KEY_ALGORITHMS]
        if self.jwt_jwks_file is not None:
            path = Path(self.jwt_jwks_file).expanduser()
            try:
                jwks = json.loads(path.read_text(encoding="utf-8"))
            except OSError as exc:
                raise ValueError(f"JWT_JWKS_FILE: cannot read {str(path)!r} ({exc.strerror or exc})") from None
            except (UnicodeDecodeError, json.JSONDecodeError):
                raise ValueError(f"JWT_JWKS_FILE: {str(path)!r} is not a JSON file") from None
            keys = jwks.get("keys") if isinstance(jwks, dict) else None
            if not isinstance(keys, list) or not keys:
                raise ValueError(f'JWT_JWKS_FILE: {str(path)!r} is not a JWKS ({{"keys": [...]}} with a key)')
            for i, key in enumerate(keys):
                if not _verifies(key, algorithms):
                    raise ValueError(
                        f"JWT_JWKS_FILE: key {i} of {str(path)!r} is no public key for {', '.join(algorithms)}"
                    )
            return dict(jwks)
        if self.jwt_public_key:
            value = self.jwt_public_key
            if value.lstrip().startswith("-----"):
                pem = value
            else:
                try:
                    pem = Path(value).expanduser().read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError, ValueError):
                    raise ValueError(
                        f"JWT_PUBLIC_KEY: {value[:200]!r} is neither a PEM key (-----BEGIN PUBLIC "
                        "KEY-----...) nor the path of a readable PEM file"
                    ) from None
            if not _verifies(pem, algorithms):
                raise ValueError(f"JWT_PUBLIC_KEY: not a PEM public key for {', '.join(algorithms)}")
            return pem
        if self.jwt_secret is not None:
            return self.jwt_secret.get_secret_value()
        raise ValueError("JWT_SECRET: AUTH=jwt needs JWT_SECRET, JWT_PUBLIC_KEY or JWT_JWKS_FILE")

    # Resolved choices: explicit setting first, then what the configured keys imply.
    def store_identity(self) -> str:
        """What names the store these settings open (provider and location; a secret URL only ever hashed by
        its users): two stores never share index snapshots (INDEX_SNAPSHOT_DIR)."""
        kind = self.resolved_datastore
        if kind == "postgres":
            return f"postgres {self.postgres_url.get_secret_value() if self.postgres_url else ''}"
        if kind == "pinecone":
            return f"pinecone {self.pinecone_host or ''} {self.pinecone_index}"
        return f"local {Path(self.local_db_path).expanduser().resolve()}"

    @property
    def resolved_jwt_algorithms(self) -> list[str]:
        """JWT_ALGORITHMS, else HS256 with a JWT_SECRET, else RS256 and ES256."""
        if self.jwt_algorithms:
            return self.jwt_algorithms
        return ["HS256"] if self.jwt_secret else ["RS256", "ES256"]

    @property
    def resolved_datastore(self) -> str:
        """The provider to use: `DATASTORE`, else pinecone when PINECONE_API_KEY is set, else local."""
        if self.datastore:
            return self.datastore
        return "pinecone" if self.pinecone_api_key else "local"

    @property
    def resolved_embedder(self) -> str:
        """The embedder to use: `EMBEDDER`, else openai when OPENAI_API_KEY is set, else local."""
        if self.embedder:
            return self.embedder
        return "openai" if self.openai_api_key else "local"

    @property
    def resolved_summariser(self) -> str:
        """The summariser to use: `SUMMARISER`, else openai when OPENAI_API_KEY is set, else extractive."""
        if self.summariser:
            return self.summariser
        return "openai" if self.openai_api_key else "extractive"


def _verifies(key: str | dict[str, Any], algorithms: list[str]) -> bool:
    """Whether python-jose loads `key` (PEM text or a JWK dict) as a key for one of `algorithms`."""
    from jose import jwk
    from jose.exceptions import JOSEError

    if isinstance(key, dict) and key.get("alg") and key["alg"] not in algorithms:
        return False
    for algorithm in algorithms:
        try:
            jwk.construct(key, algorithm)
        except (JOSEError, ValueError, TypeError, KeyError):
            continue
        return True
    return False
