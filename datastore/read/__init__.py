"""The read path: ranking, a fork's lineage, queries, find, listings, stats."""
