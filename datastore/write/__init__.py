"""The write path: chunk -> embed -> roll up (build.py), remember and upsert, delete and rebuild."""
