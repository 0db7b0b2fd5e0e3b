"""Real services on loopback that the tests and the benchmarks both start (tests never import bench/, bench never
imports tests/): PostgreSQL 16 + pgvector from the `pgserver` wheel and the needledb Pinecone emulator
(servers.py), and a server speaking OpenAI's wire format (openai_server.py), where the real service is unreachable.
Not part of the installed packages."""
