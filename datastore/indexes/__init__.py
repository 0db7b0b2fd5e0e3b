"""In-memory indexes of the local store: exact vectors (with an optional IVF index) and BM25, by row id."""
