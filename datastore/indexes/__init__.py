"""Search above the providers: each namespace's in-memory indexes (exact vectors with an optional IVF index, BM25)
fed from any Storage, and the Searchable queries rank over."""
