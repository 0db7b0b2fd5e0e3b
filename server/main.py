"""`python -m server.main`: serve the API with hypercorn, settings from the environment."""

from __future__ import annotations

import asyncio
import ctypes
import errno
import gc
import logging
import os
import socket
import sys
from typing import TYPE_CHECKING

from pydantic import ValidationError

from models.settings import Settings

if TYPE_CHECKING:
    from quart import Quart


def open_error(exc: BaseException) -> str:
    """The cause of a failed store open, in one line (the library's own message when it wraps one)."""
    cause = exc.__cause__ or exc
    text = getattr(cause, "message", None) or str(cause) or type(cause).__name__
    return " ".join(text.split())


def check_store(settings: Settings) -> str:
    """Open and close the configured store once, so a store that cannot be opened is one clear line on stderr
    and exit status 1 (not a traceback from inside the server); returns its location (never a secret)."""
    from datastore.factory import open_memory, store_location

    where = store_location(settings)
    try:
        open_memory(settings).close()
    except Exception as exc:  # any provider, any cause: the operator needs one line, not a traceback
        print(f"pyramind: cannot open the store ({where}): {open_error(exc)}", file=sys.stderr)
        raise SystemExit(1) from None
    return where


def listen_or_exit(host: str, port: int) -> socket.socket:
    """The server's socket, bound to host:port now, before the store is opened and the model loaded: an address
    in use (a second server on the port) or refused is one line on stderr naming the port and exit status 1, not a
    traceback after the start-up work. Hypercorn takes the socket over (`fd://` bind) and listens on it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as hypercorn does: a restart reuses TIME_WAIT
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            why = "it is in use (another server?); stop that one or choose another port with PORT or --port"
        else:
            why = exc.strerror or str(exc)
        print(f"pyramind: cannot listen on port {port} of {host}: {why}", file=sys.stderr)
        raise SystemExit(1) from None
    return sock


def one_blas_thread() -> None:
    """Run every numpy product of this process on one BLAS thread: requests run side by side in threads, and
    OpenBLAS's own threads fought the request threads and the embedder for the cores (bench.load at 100 req/s
    had p95 321 ms after 5 minutes with them, 47 ms without: bench/RESULTS.md, Load). A process-wide setting,
    so it is the serving process's entry point that makes it, never the app factory a library user calls."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(1, user_api="blas")


def few_malloc_arenas(arenas: int = 2) -> None:
    """At most `arenas` glibc malloc arenas for the threads this process starts from now on (M_ARENA_MAX), unless
    the environment sets MALLOC_ARENA_MAX (glibc then read it). By default glibc gives threads up to 8 arenas a
    core, and memory freed in one (an index load's transient rows, a request's arrays) stays in it: with 2 arenas
    the server's peak RSS over its start was 74 MiB against 219 MiB at 20 users of 2k nodes (bench/RESULTS.md,
    many users). Process-wide, so the serving entry point makes it, as `one_blas_thread`; no-op off glibc."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(ctypes.c_int(_M_ARENA_MAX), ctypes.c_int(arenas))


_M_ARENA_MAX = -8  # glibc's malloc.h


def freeze_start_heap(app: Quart) -> None:
    """Once `app` has started (its other before_serving hooks ran: the store opened, the model warmed up), move
    every object then alive to the garbage collector's permanent generation (`gc.freeze`), after one collection
    so no garbage is frozen with them; when it stops serving, move them back (`gc.unfreeze`). The start's objects
    (the model's runtime, the libraries, ~135k containers) are never garbage, yet a full collection scanned them
    all: under Zipf traffic index loads set one off every ~10 s, 120-150 ms with every request thread stopped, the
    requests over 220 ms of 292 at 10 req/s (bench/RESULTS.md, zipf). Frozen objects are still freed when their
    last reference goes. Process-wide, so the serving entry point makes it, as `one_blas_thread`."""

    @app.before_serving
    async def _freeze() -> None:
        gc.collect()
        gc.freeze()

    @app.after_serving
    async def _unfreeze() -> None:
        gc.unfreeze()


def serve(settings: Settings) -> None:
    """Run the app on settings.host:settings.port until interrupted; prints the store's location first."""
    from hypercorn.asyncio import serve as hypercorn_serve
    from hypercorn.config import Config

    from server import http_errors
    from server.app import create_app
    from server.auth import check_auth_settings

    try:
        check_auth_settings(settings)  # a missing key: one line, before the store and the model are loaded
    except ValueError as exc:
        print(f"pyramind: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    few_malloc_arenas()  # before the store's and the app's threads start
    sock = listen_or_exit(settings.host, settings.port)  # a busy port: one line, before any start-up work
    print(f"pyramind: store: {check_store(settings)}", file=sys.stderr, flush=True)
    http_errors.install()
    one_blas_thread()
    app = create_app(settings)
    freeze_start_heap(app)  # registered last: runs after the app's own start
    config = Config()
    config.bind = [f"fd://{sock.detach()}"]  # the bound socket's descriptor, hypercorn's from here on
    config.accesslog = "-"
    config.errorlog = server_log()
    asyncio.run(hypercorn_serve(app, config))


def server_log() -> logging.Logger:
    """hypercorn's error log ("Running on ...", errors) on stderr, printed once. Given "-", hypercorn gives the
    logger a handler of its own and leaves it propagating, so with a root handler (the CLI's logging.basicConfig)
    every line came out twice; a logger passed in is used as it is (hypercorn's `errorlog` setting)."""
    log = logging.getLogger("hypercorn.error")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter("%(asctime)s [%(process)d] [%(levelname)s] %(message)s", "[%Y-%m-%d %H:%M:%S %z]")
    )
    log.handlers = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False
    return log


def settings_or_exit() -> Settings:
    """Settings() from the environment; a bad value is one line per problem on stderr (naming the setting) and
    exit status 2, not a traceback."""
    try:
        return Settings()
    except ValidationError as exc:
        for line in setting_errors(exc):
            print(line, file=sys.stderr)
        raise SystemExit(2) from None


def setting_errors(exc: ValidationError) -> list[str]:
    """One line per problem, each naming the setting: `pyramind: bad setting KEY: what is wrong`. A check across
    keys has no location; its message starts with the key it names (models/settings.py)."""
    lines = []
    for err in exc.errors():
        msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
        name = ".".join(str(p) for p in err.get("loc", ())).upper()
        lines.append(f"pyramind: bad setting {name}: {msg}" if name else f"pyramind: bad setting {msg}")
    return lines


def start() -> None:
    serve(settings_or_exit())


if __name__ == "__main__":
    start()
