"""Load benchmark: an open-loop mix of remember and query calls against a real server, with its memory over time.

Run: `.venv/bin/python -m bench.load --duration 600 --rate 100` (10 minutes; `--duration 60` for a check).

A `python -m server.main` process is started on 127.0.0.1 (a free port) over a fresh local store in a temporary
folder, with the offline embedder and summariser. Requests are sent open-loop: arrivals are scheduled at `--rate`
per second (Poisson, seeded) whatever the answers, each a remember (`--remember-share`, default 30%: two new
messages into one of `--conversations`) or a query (top 5 over everything). A request's latency runs from its
scheduled time, so a slow server is not hidden by a slow client. When `--max-in-flight` requests are already
open, an arrival is not sent and counts as an error ("shed").

Every `--interval` seconds (10) one line: requests completed, error rate, latency p50/p95/p99, achieved rate,
requests in flight and the server's RSS (VmRSS of /proc/<pid>/status). At the end the server is stopped, and
the summary says whether RSS grew by more than 10% from the end of the warm-up (`--warmup`, default 60 s or a
fifth of a shorter run) to the end. Every number goes to bench/out/load.json; `--write-results` also replaces
the `load` section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np

from bench.meters import proc_rss_mib

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
TOKEN = "load-test-token"
GROWTH_LIMIT = 0.10
WORDS = (
    "garden lake cabin violin bakery report sister cat train museum recipe budget concert hiking doctor "
    "birthday holiday piano painting football camera kitchen library market river island project"
).split()
USAGE = """Open-loop mix of remember (`--remember-share`, two messages each) and query (top 5) against a real
`python -m server.main` on 127.0.0.1 over a fresh local store; every 10 s: error rate, latency
p50/p95/p99 and the
server's RSS. Run on a quiet machine (10 minutes):

    .venv/bin/python -m bench.load --duration 600 --rate 100 --remember-share 0.1 --write-results

(`--duration 60` for a short check; every number also goes to bench/out/load.json.)
"""


@dataclass
class Window:
    """One interval's figures; latencies in milliseconds, RSS in MiB."""

    t: float
    completed: int
    errors: int
    shed: int
    error_rate: float
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    rate: float
    in_flight: int
    rss_mib: float | None
    remember_p50_ms: float | None = None
    query_p50_ms: float | None = None


@dataclass
class Run:
    args: dict
    windows: list[Window] = field(default_factory=list)
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 1) if values else None


class Server:
    """The server process (own session, loopback only); `stop()` always ends it."""

    def __init__(self, folder: Path, threads: int, extra: dict[str, str] | None = None) -> None:
        self.folder, self.port = folder, free_port()
        env = {k: v for k, v in os.environ.items() if k.upper() not in _setting_names()}
        env.update(
            {
                "LOCAL_DB_PATH": str(folder / "pyramind.db"),
                "BEARER_TOKEN": TOKEN,
                "HOST": "127.0.0.1",
                "PORT": str(self.port),
                "EMBED_THREADS": str(threads),
                "DATASTORE": "local",
                "EMBEDDER": "local",
                "SUMMARISER": "extractive",
                "HF_HUB_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false",
                "PYTHONPATH": str(ROOT),
            }
        )
        env.update(extra or {})  # more settings (the remember-latency and fairness benchmarks)
        self.log_path = folder / "server.log"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "server.main"],
                cwd=folder,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def wait_ready(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=2) as http:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"server exited ({self.proc.returncode}); log: {self.log_path}")
                try:
                    if (await http.get(f"{self.url}/health")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"server not ready after {timeout:.0f} s; log: {self.log_path}")
                await asyncio.sleep(0.2)

    def stop(self) -> None:
        """SIGTERM, SIGKILL after 15 s."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(15)


def _setting_names() -> set[str]:
    from models.settings import Settings

    return {name.upper() for name in Settings.model_fields}


class Load:
    """The open-loop client: schedules arrivals, records (kind, scheduled, done, ok) per request."""

    def __init__(self, args: argparse.Namespace, server: Server) -> None:
        self.args, self.server = args, server
        self.rng = random.Random(args.seed)
        self.done: list[tuple[str, float, float, str | None]] = []  # (kind, scheduled, finished, error or None)
        self.in_flight = 0
        self.next_msg = 0

    def body(self, kind: str) -> dict:
        rng = self.rng
        if kind == "remember":
            conv = f"load-{rng.randrange(self.args.conversations)}"
            msgs = []
            for j in range(2):
                self.next_msg += 1
                a, b, c = rng.sample(WORDS, 3)
                msgs.append(
                    {
                        "id": f"m{self.next_msg}",
                        "speaker": ("Ana", "Ben")[j],
                        "content": f"Note {self.next_msg}: the {a} plan moved to {b} day, so bring the {c} "
                        f"and call before {rng.randrange(1, 12)} o'clock.",
                    }
                )
            return {"conversation_id": conv, "messages": msgs}
        a, b = rng.sample(WORDS, 2)
        return {"queries": [{"query": f"when is the {a} {b}?", "top_k": 5}]}

    async def one(self, http: httpx.AsyncClient, kind: str, scheduled: float) -> None:
        self.in_flight += 1
        error: str | None = None
        try:
            r = await http.post(f"/{kind}", json=self.body(kind))
            # a remember answers 202 once its messages are stored (they are indexed in the background)
            if r.status_code != 200 and not (kind == "remember" and r.status_code == 202):
                error = f"http {r.status_code}"
        except httpx.TimeoutException:
            error = "timeout"
        except httpx.TransportError as exc:
            error = type(exc).__name__
        finally:
            self.in_flight -= 1
        self.done.append((kind, scheduled, time.monotonic(), error))

    async def run(self, on_window: Callable[[float, float], None]) -> None:
        a = self.args
        limits = httpx.Limits(max_connections=a.max_in_flight, max_keepalive_connections=a.max_in_flight)
        timeout = httpx.Timeout(a.timeout, pool=a.timeout)
        async with httpx.AsyncClient(
            base_url=self.server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=timeout, limits=limits
        ) as http:
            tasks: set[asyncio.Task] = set()
            start = time.monotonic()
            next_at, next_window = start, start + a.interval
            end = start + a.duration
            while True:
                now = time.monotonic()
                if now >= next_window:
                    on_window(next_window - start, start)
                    next_window += a.interval
                if now >= end:
                    break
                if now < next_at:
                    await asyncio.sleep(min(next_at, next_window, end) - now)
                    continue
                kind = "remember" if self.rng.random() < a.remember_share else "query"
                if self.in_flight >= a.max_in_flight:
                    self.done.append((kind, next_at, now, "shed"))
                else:
                    t = asyncio.create_task(self.one(http, kind, next_at))
                    tasks.add(t)
                    t.add_done_callback(tasks.discard)
                next_at += self.rng.expovariate(a.rate)
                await asyncio.sleep(0)  # let the requests just made start
            if tasks:  # let what was sent finish (bounded by the request timeout)
                await asyncio.wait(tasks, timeout=a.timeout + 5)
            for t in tasks:
                t.cancel()


async def preload(server: Server, load: Load, calls: int) -> None:
    """A few remember calls per conversation, so queries have something to find from the start."""
    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as http:
        for _ in range(calls):
            r = await http.post("/remember", json=load.body("remember"))
            r.raise_for_status()


def window(load: Load, since: float, until: float, t: float, pid: int) -> Window:
    rows = [d for d in load.done if since <= d[2] < until]
    lat = [(d[2] - d[1]) * 1000 for d in rows if d[3] is None]
    errors = sum(1 for d in rows if d[3] is not None)
    shed = sum(1 for d in rows if d[3] == "shed")
    by_kind = {k: [(d[2] - d[1]) * 1000 for d in rows if d[3] is None and d[0] == k] for k in ("remember", "query")}
    return Window(
        t=round(t, 1),
        completed=len(rows),
        errors=errors,
        shed=shed,
        error_rate=round(errors / len(rows), 4) if rows else 0.0,
        p50_ms=pct(lat, 50),
        p95_ms=pct(lat, 95),
        p99_ms=pct(lat, 99),
        rate=round(len(rows) / (until - since), 1),
        in_flight=load.in_flight,
        rss_mib=(round(r, 1) if (r := proc_rss_mib(pid)) is not None else None),
        remember_p50_ms=pct(by_kind["remember"], 50),
        query_p50_ms=pct(by_kind["query"], 50),
    )


def summarise(load: Load, run: Run, warmup: float) -> dict:
    rows = load.done
    ok = [(d[2] - d[1]) * 1000 for d in rows if d[3] is None]
    for d in rows:
        if d[3] is not None:
            run.errors_by_kind[d[3]] = run.errors_by_kind.get(d[3], 0) + 1
    rss = [(w.t, w.rss_mib) for w in run.windows if w.rss_mib is not None]
    after = [r for t, r in rss if t >= warmup]
    base, last = (after[0], after[-1]) if after else (None, None)
    growth = (last - base) / base if base and last is not None else None
    return {
        "requests": len(rows),
        "errors": len(rows) - len(ok),
        "shed": sum(1 for d in rows if d[3] == "shed"),
        "error_rate": round((len(rows) - len(ok)) / len(rows), 4) if rows else 0.0,
        "p50_ms": pct(ok, 50),
        "p95_ms": pct(ok, 95),
        "p99_ms": pct(ok, 99),
        "achieved_rate": round(len(rows) / run.args["duration"], 1),
        "served_rate": round(len(ok) / run.args["duration"], 1),
        "rss_start_mib": rss[0][1] if rss else None,
        "rss_after_warmup_mib": base,
        "rss_end_mib": last,
        "rss_max_mib": max((r for _, r in rss), default=None),
        "rss_growth_after_warmup": round(growth, 4) if growth is not None else None,
        "rss_grew_over_10pct": (growth > GROWTH_LIMIT) if growth is not None else None,
        "warmup_s": warmup,
    }


def markdown(run: Run) -> str:
    a, s = run.args, run.summary
    from bench.common import machine

    lines = [
        "## Load",
        "",
        USAGE,
        f"- date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {machine()}",
        f"- command: `.venv/bin/python -m bench.load --duration {a['duration']:g} --rate {a['rate']:g}`",
        f"- mix: {a['remember_share']:.0%} remember (2 messages each), {1 - a['remember_share']:.0%} query "
        f"(top 5); {a['conversations']} conversations; open loop, max {a['max_in_flight']} in flight",
        "",
        f"**{s['requests']} requests, error rate {s['error_rate']:.2%} ({s['shed']} shed), "
        f"latency p50/p95/p99 {s['p50_ms']} / "
        f"{s['p95_ms']} / {s['p99_ms']} ms, offered {s['achieved_rate']} req/s, "
        f"served {s.get('served_rate')} req/s without error; RSS {s['rss_after_warmup_mib']} "
        f"MiB after a {s['warmup_s']:g} s warm-up, {s['rss_end_mib']} MiB at the end "
        f"({(s['rss_growth_after_warmup'] or 0):+.1%}: {'GREW beyond' if s['rss_grew_over_10pct'] else 'within'} "
        "10%).**",
        "",
        "| t (s) | done | errors | of which shed | p50 ms | p95 ms | p99 ms | req/s | in flight | RSS MiB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for w in run.windows:
        lines.append(
            f"| {w.t:g} | {w.completed} | {w.error_rate:.1%} | {w.shed} | {w.p50_ms} | {w.p95_ms} | "
            f"{w.p99_ms} | {w.rate} | {w.in_flight} | {w.rss_mib} |"
        )
    if run.errors_by_kind:
        lines += ["", "Errors: " + ", ".join(f"{k} {v}" for k, v in sorted(run.errors_by_kind.items()))]
    return "\n".join(lines) + "\n"


async def bench(args: argparse.Namespace) -> Run:
    folder = Path(tempfile.mkdtemp(prefix="pyramind-load-"))
    server = Server(folder, args.embed_threads)
    run = Run(args=vars(args))
    warmup = args.warmup if args.warmup is not None else min(60.0, args.duration / 5)
    try:
        await server.wait_ready()
        load = Load(args, server)
        await preload(server, load, args.conversations)
        print(
            f"server pid {server.proc.pid} on {server.url}; {args.rate:g} req/s for {args.duration:g} s "
            f"(warm-up {warmup:g} s)",
            flush=True,
        )
        print(
            f"{'t':>6} {'done':>6} {'err%':>6} {'shed':>5} {'p50':>8} {'p95':>8} {'p99':>8} {'req/s':>6} {'open':>5} "
            f"{'RSS MiB':>8}",
            flush=True,
        )

        def on_window(t: float, start: float) -> None:
            w = window(load, start + t - args.interval, start + t, t, server.proc.pid)
            run.windows.append(w)
            print(
                f"{w.t:6g} {w.completed:6d} {w.error_rate:6.1%} {w.shed:5d} {w.p50_ms!s:>8} {w.p95_ms!s:>8} "
                f"{w.p99_ms!s:>8} {w.rate:6g} {w.in_flight:5d} {w.rss_mib!s:>8}",
                flush=True,
            )

        await load.run(on_window)
        run.summary = summarise(load, run, warmup)
    finally:
        server.stop()
        if args.keep:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    return run


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=600, help="seconds of load (default 600)")
    p.add_argument("--rate", type=float, default=100, help="requests per second, open loop (default 100)")
    p.add_argument("--remember-share", type=float, default=0.3, help="share of remember calls (default 0.3)")
    p.add_argument("--conversations", type=int, default=20, help="conversations remembered into (default 20)")
    p.add_argument("--interval", type=float, default=10, help="seconds per reported window (default 10)")
    p.add_argument(
        "--warmup", type=float, default=None, help="seconds before the RSS baseline (default 60 or a fifth of the run)"
    )
    p.add_argument("--max-in-flight", type=int, default=500, help="open requests before arrivals are shed")
    p.add_argument("--timeout", type=float, default=30, help="seconds per request (default 30)")
    p.add_argument("--embed-threads", type=int, default=1, help="EMBED_THREADS of the server (default 1)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep", action="store_true", help="keep the temporary store and server log")
    p.add_argument("--write-results", action="store_true", help="replace the load section of bench/RESULTS.md")
    args = p.parse_args(argv)
    if args.duration <= 0 or args.rate <= 0 or not 0 <= args.remember_share <= 1:
        p.error("--duration and --rate must be positive, --remember-share within [0, 1]")
    run = asyncio.run(bench(args))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "load.json").write_text(
        json.dumps(
            {
                "args": run.args,
                "summary": run.summary,
                "errors": run.errors_by_kind,
                "windows": [asdict(w) for w in run.windows],
            },
            indent=1,
        )
    )
    text = markdown(run)
    print("\n" + text)
    if args.write_results:
        from bench.common import write_section

        write_section("load", text)


if __name__ == "__main__":
    main()
