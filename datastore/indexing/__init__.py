"""Background indexing: the steps over the store (steps.py) and the lanes that run them (background.py)."""
