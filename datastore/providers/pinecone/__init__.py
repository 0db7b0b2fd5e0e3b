"""The Pinecone store (the official SDK); `PineconeStorage` is in store.py, record ids and metadata codecs in
records.py, the SDK calls (retried, batched) that the store and its capability tables share in client.py."""

from datastore.providers.pinecone.store import PineconeStorage

__all__ = ["PineconeStorage"]
