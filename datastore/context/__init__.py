"""The context block (/context) and core memory."""
