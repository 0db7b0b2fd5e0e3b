"""Storage and the pipeline: `Memory` (memory.py) composes the services of each room (write, read, context,
lifetime, indexing, portability) over one `Storage` provider (storage.py, providers/); factory.py opens them."""
