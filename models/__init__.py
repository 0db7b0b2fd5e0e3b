"""Pydantic shapes shared by every layer: the memory node, the API's requests and responses, settings."""
