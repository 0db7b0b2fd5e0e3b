"""The local server (auth off, CORS for localhost and ChatGPT, port 3333) and the `pyramind` CLI."""
