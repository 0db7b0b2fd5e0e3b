"""Storage: the abstract DataStore that owns the pipeline, its providers, and the factory that picks one."""
