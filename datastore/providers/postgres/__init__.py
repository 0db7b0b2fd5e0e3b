"""The PostgreSQL store (PostgreSQL + pgvector, psycopg 3); `PostgresStorage` is in store.py."""

from datastore.providers.postgres.store import PostgresStorage

__all__ = ["PostgresStorage"]
