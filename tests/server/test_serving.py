"""What the server sets up for itself when it starts serving (the app's before_serving hooks)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import asyncio, json, sys
import hypercorn.asyncio
from threadpoolctl import threadpool_info
from server.app import create_app
from server.main import serve
from tests.support.settings import make_settings

def blas():
    return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]

async def main():
    before = blas()
    app = create_app(make_settings(__import__("pathlib").Path(sys.argv[1])))
    async with app.test_app():
        app_serving = blas()
    return before, app_serving

before, app_serving = asyncio.run(main())
served = []

async def record(app, config, **kwargs):  # hypercorn's serve, replaced: what the process runs with, then stop
    served.append(blas())

hypercorn.asyncio.serve = record
serve(make_settings(__import__("pathlib").Path(sys.argv[1])))
print(json.dumps({"before": before, "app": app_serving, "serve": served[0]}))
"""


def test_the_serving_process_runs_numpy_products_on_one_blas_thread(tmp_path: Path) -> None:
    """Requests run side by side in threads; numpy's BLAS threads on top of them slowed /query ~7x under
    bench.load. A fresh process (so this test's own limits do not leak) starts numpy with its default pool,
    one thread per core. The app factory, which a library user or a test calls, leaves that process-wide
    setting alone; `pyramind serve` (server.main.serve) brings it to one thread before it serves."""
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=root, capture_output=True, text=True, timeout=300, check=True
    )
    threads = json.loads(out.stdout.strip().splitlines()[-1])
    assert threads["before"] and threads["app"] == threads["before"]
    assert threads["serve"] == [1] * len(threads["before"])


async def test_the_server_loads_the_token_encoding_before_it_serves(tmp_path: Path) -> None:
    """Every /context counts cl100k tokens; loading the encoding took 0.35-0.6 s, paid by the first /context
    after each start (bench/RESULTS.md, many users). The app loads it while starting, before /health answers."""
    from server.app import create_app
    from services.tokens import get_encoding
    from tests.support.settings import make_settings

    get_encoding.cache_clear()
    app = create_app(make_settings(tmp_path))
    async with app.test_app():
        assert get_encoding.cache_info().currsize == 1  # no request made yet


ARENAS = """
import ctypes, json, os, sys, tempfile, threading
import hypercorn.asyncio
from server.main import serve
from tests.support.settings import make_settings

libc = ctypes.CDLL(None)

def arenas_of_threads(n):  # n threads allocating at once; then the heaps glibc's malloc_info lists
    barrier = threading.Barrier(n + 1)
    def work():
        held = [bytearray(200) for _ in range(2000)]
        barrier.wait(); barrier.wait()
    threads = [threading.Thread(target=work) for _ in range(n)]
    for t in threads: t.start()
    barrier.wait()
    path = tempfile.mktemp()
    libc.fopen.restype = ctypes.c_void_p
    f = libc.fopen(path.encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(f)); libc.fclose(ctypes.c_void_p(f))
    barrier.wait()
    for t in threads: t.join()
    return open(path).read().count("<heap nr=")

async def record(app, config, **kwargs):
    pass

hypercorn.asyncio.serve = record
serve(make_settings(__import__("pathlib").Path(sys.argv[1])))
print(json.dumps({"heaps": arenas_of_threads(12)}))
"""


def test_the_serving_process_keeps_its_threads_to_two_malloc_arenas(tmp_path: Path) -> None:
    """glibc gives threads up to 8 malloc arenas a core, and what one frees stays in it: the server's peak RSS
    at 20 users of 2k nodes was 219 MiB over its start with them, 74 MiB with 2 (bench/RESULTS.md, many users).
    `pyramind serve` limits them before its threads start; an operator's MALLOC_ARENA_MAX is left alone."""
    if sys.platform != "linux":
        return
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in __import__("os").environ.items() if k != "MALLOC_ARENA_MAX"}

    def heaps(extra: dict[str, str]) -> int:
        out = subprocess.run(
            [sys.executable, "-c", ARENAS, str(tmp_path)],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
            env={**env, **extra},
        )
        return int(json.loads(out.stdout.strip().splitlines()[-1])["heaps"])

    assert heaps({}) <= 2
    assert heaps({"MALLOC_ARENA_MAX": "6"}) > 2  # the operator's setting wins


FREEZE_SCRIPT = """
import asyncio, gc, json, sys
import hypercorn.asyncio
from server.app import create_app
from server.main import serve
from tests.support.settings import make_settings

async def factory_only():
    app = create_app(make_settings(__import__("pathlib").Path(sys.argv[1])))
    async with app.test_app():
        return gc.get_freeze_count()

seen = {"factory": asyncio.run(factory_only())}

async def record(app, config, **kwargs):  # hypercorn's serve, replaced: the app started and stopped as it would
    async with app.test_app():
        seen["serving"] = gc.get_freeze_count()
    seen["stopped"] = gc.get_freeze_count()

hypercorn.asyncio.serve = record
serve(make_settings(__import__("pathlib").Path(sys.argv[1])))
print(json.dumps(seen))
"""


def test_the_serving_process_freezes_its_start_heap_out_of_the_collector(tmp_path: Path) -> None:
    """A full garbage collection scanned every object of the start (the model's runtime, the libraries): under
    Zipf traffic one every ~10 s stopped every request for 120-150 ms (bench/RESULTS.md, zipf). `pyramind
    serve` moves what is alive once the app has started into the permanent generation (gc.freeze), and back when
    it stops; the app factory, which a library user or a test calls, leaves the process's collector alone."""
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", FREEZE_SCRIPT, str(tmp_path)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["factory"] == 0
    assert seen["serving"] > 10_000  # the start's objects: the model's runtime, the libraries, the app
    assert seen["stopped"] == 0
