"""Storage providers (the protocol: datastore/storage.py); each is imported only when the factory chooses it."""
