"""The embedded default store (one SQLite file); `LocalStorage` is in store.py."""

from datastore.providers.local.store import LocalStorage

__all__ = ["LocalStorage"]
