"""Many users on one deployment: T namespaces (one per user, as a JWT per user gives them), Zipf traffic, the
in-memory indexes holding about a fifth of the nodes.

Run: `.venv/bin/python -m bench.users --datastore postgres --write-results` (~10-15 minutes on 2 cores);
`--quick` for a check (~2 minutes). `--datastore local|postgres|pinecone` as the other benchmarks (PostgreSQL 16 +
pgvector from the pgserver wheel, the needledb emulator: bench/common.py).

Each point is T users of about the same size (or one heavy user and a small one), built straight into the store by
bench/synthetic.py (`fill`: sealed chunks with their summaries and a line per message, texts drawn from LoCoMo's
vocabulary, clustered unit vectors; nothing is embedded), then a real `python -m server.main` (bench/load.py's
`Server`) with AUTH=jwt: every request carries its user's HS256 token, whose `sub` is the namespace.
INDEX_MAX_NODES is a fifth of the point's nodes (at least the setting's floor of 1,000, and for the heavy point
less than the heavy namespace, so one other user evicts it). Phases, sequential unless said:

0. the server's first /query and /context (an empty namespace): what its start left to the first requests (the
   token encoding's load was 0.35-0.6 s before the server paid it while starting).
1. cold after a restart: the server just started; each sampled user's first request (/context and /query in turn:
   each user is cold once), then warm: `--warm` /query and /context requests of the same user right after. With
   snapshots, the start's preload (INDEX_PRELOAD_SHARE, `--preload-share`) is awaited first (/metrics says when it
   ended: `preload_done_s` from the process's start); a sampled user whose first request loaded no index (the
   preload had read it) counts as "preloaded", apart from the cold ones. The sampled users come back most recently
   active first (by their last request to the previous process: the users active before a restart return first);
   the snapshots' writer requested them last. `--restarts` repeats this phase on as many fresh processes (each
   one's previous life: the one before).
2. cold after an eviction: sampled users requested in a cycle whose nodes exceed INDEX_MAX_NODES, twice: in the
   second pass each was evicted (least recently used) before its turn; the index loads counted by /metrics say so.
3. Zipf: `--zipf-seconds` of traffic, each user drawn with probability ~ 1/rank^`--zipf-s` (ranks shuffled),
   half /query, half /context; the server's RSS (VmRSS) sampled. A closed loop by default (`--concurrency`
   requests in flight, each sent when one returns: the server saturated, a request's latency about concurrency /
   throughput); `--zipf-rate R` sends an open loop instead, Poisson arrivals at R requests a second, each timed from
   its arrival (queueing counted): the latency users see at that traffic. The latencies are also split by the
   most requests in flight beside each one (alone, beside one other, beside two or more): whether the slow ones
   were slow alone or shared the server's cores.

RSS is compared with what INDEX_MAX_NODES documents (`rss_budget`): the RSS at the first request, ~40 MiB of serving,
~3 KB a node held and ~12 KB a node of each namespace being listed and indexed at the time. Its peak is the peak
while serving (the high-water mark is reset after the first requests; loading the model at start peaks ~40 MiB
above the RSS it settles at, reported apart).
Every number goes to bench/out/users.json; `--write-results` replaces the `users` section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from jose import jwt

from bench import common, dataset, synthetic
from bench.load import Server
from bench.meters import percentiles, proc_peak_rss_mib, proc_rss_mib, reset_peak_rss

SECRET = "bench-users-secret-" + "x" * 45  # HS256 key of the benchmark's tokens (64 bytes)
NODE_KB = 3.0  # what INDEX_MAX_NODES documents per node held (models/settings.py)
LOAD_KB = 12.0  # ... and per node of a namespace while it is listed and indexed (a snapshot's read: NODE_KB)
SERVING_MIB = 40.0  # ... and what serving adds to the process at its first request (threads, connections, caches)
SMALL_CHUNKS = 12  # a small user: 12 chunks + 3 summaries + 60 lines = 75 nodes
HEAVY_CHUNKS = 320  # a BEAM-sized chat: 320 chunks + ~80 summaries + 1,600 lines = ~2,000 nodes


@dataclass
class Point:
    """One configuration: `users` (namespace -> chunks, lines or not) and which of them the cold and warm
    phases measure; `zipf`: whether Zipf traffic runs (not for the heavy point: one user is not many)."""

    name: str
    users: dict[str, tuple[int, bool]]
    measured: list[str]
    zipf: bool = True
    restarts: int = 1
    passes: int | None = None  # eviction passes (None: --evictions)
    nodes: dict[str, int] = field(default_factory=dict)  # namespace -> nodes stored (read after the build)


def points(quick: bool, heavy: int) -> list[Point]:
    """The default points (see the module doc); `quick` makes them small."""

    def same(name: str, count: int, chunks: int) -> Point:
        users = {f"user-{name}-{i:04d}": (chunks, True) for i in range(count)}
        return Point(f"{count} users x {name}", users, list(users)[: min(count, 16)])

    big = f"user-heavy-{heavy}"
    heavy_point = Point(
        f"1 user x {heavy:,} chunks (+ 1 small)",
        {big: (heavy, False), "user-heavy-small": (SMALL_CHUNKS, True)},
        [big],
        zipf=False,
        passes=1,  # each pass reloads the heavy namespace: one is enough
    )
    if quick:
        return [same("small", 10, SMALL_CHUNKS), same("2k", 5, HEAVY_CHUNKS), heavy_point]
    return [
        same("small", 40, SMALL_CHUNKS),
        same("small", 400, SMALL_CHUNKS),
        same("2k", 20, HEAVY_CHUNKS),
        heavy_point,
    ]


def token(ns: str) -> str:
    """The user's JWT: HS256 over {sub: ns, exp: in a day}."""
    return str(jwt.encode({"sub": ns, "exp": int(time.time()) + 86_400}, SECRET, algorithm="HS256"))


def build(point: Point) -> float:
    """Fill a fresh store of the enclosing provider with the point's users; returns the seconds it took."""
    settings = common.bench_settings(common.OUT / "users" / "users.db")
    from services.embedding import LocalEmbedder

    memory = common.open_store(settings, LocalEmbedder())  # the server's embedder (the store records it)
    started = time.perf_counter()
    try:
        for seed, (ns, (chunks, lines)) in enumerate(point.users.items()):
            synthetic.fill(memory, ns, chunks, seed=seed, with_lines=lines)
        for ns in point.users:
            counts = memory.storage.counts(ns)
            point.nodes[ns] = sum(v for k, v in counts.items() if k.startswith("L"))
    finally:
        memory.close()
    return time.perf_counter() - started


class Client:
    """Requests as the point's users; every latency recorded as (route, namespace, ms)."""

    def __init__(self, server: Server, questions: list[str]) -> None:
        self.server = server
        self.questions = questions
        self.rng = random.Random(7)
        self.http = httpx.AsyncClient(base_url=server.url, timeout=600)
        self.tokens: dict[str, str] = {}
        self.last: dict[str, float] = {}  # namespace -> when its last request was sent (time.monotonic)

    def _auth(self, ns: str) -> dict[str, str]:
        if ns not in self.tokens:
            self.tokens[ns] = token(ns)
        return {"Authorization": f"Bearer {self.tokens[ns]}"}

    async def call(self, route: str, ns: str, sources: int, due: float | None = None) -> float:
        """One /query (top 5, default mode) or /context (one of the user's conversations) as user `ns`;
        returns its milliseconds, counted from `due` (a time.perf_counter() instant: when an open loop meant to
        send it) when given, else from the send. Raises RuntimeError on any status but 200."""
        self.last[ns] = time.monotonic()
        question = self.rng.choice(self.questions)
        if route == "query":
            body: dict[str, Any] = {"queries": [{"query": question, "top_k": 5}]}
        else:
            body = {"conversation_id": f"synthetic-{self.rng.randrange(sources):05d}", "query": question}
        started = time.perf_counter() if due is None else due
        r = await self.http.post(f"/{route}", json=body, headers=self._auth(ns))
        ms = (time.perf_counter() - started) * 1000
        if r.status_code != 200:
            raise RuntimeError(f"/{route} as {ns} answered {r.status_code}: {r.text[:300]}")
        return ms

    async def metrics(self, ns: str) -> dict[str, float]:
        """The index figures of /metrics: loads (count of `load`), nodes and namespaces held."""
        text = (await self.http.get("/metrics", headers=self._auth(ns))).text
        out = {"loads": 0.0, "nodes": 0.0, "namespaces": 0.0, "preload_done": 0.0, "preloaded": 0.0}
        out |= {"preloaded_nodes": 0.0, "preload_s": 0.0}
        for key, pattern in (
            ("loads", r'^pyramind_index_load_seconds_count\{kind="load"\} (\S+)$'),
            ("preload_done", r"^pyramind_index_preload_done (\S+)$"),
            ("preloaded", r"^pyramind_index_preloaded_namespaces (\S+)$"),
            ("preloaded_nodes", r"^pyramind_index_preloaded_nodes (\S+)$"),
            ("preload_s", r"^pyramind_index_preload_seconds (\S+)$"),
            ("nodes", r"^pyramind_index_nodes (\S+)$"),
            ("namespaces", r"^pyramind_index_namespaces (\S+)$"),
        ):
            m = re.search(pattern, text, re.M)
            out[key] = float(m.group(1)) if m else 0.0
        return out


def _sources(point: Point, ns: str) -> int:
    return max(1, -(-point.users[ns][0] // synthetic.PER_SOURCE))


async def run_point(point: Point, args: argparse.Namespace, questions: list[str], snapshots: bool) -> dict:
    """Every phase of one point on a server over the built store (module doc); with `snapshots`, the server keeps
    index snapshots (INDEX_SNAPSHOT_DIR), written by a previous server that requested every user once."""
    total = sum(point.nodes.values())
    biggest = max(point.nodes.values())
    max_nodes = max(1_000, total // 5)
    if not point.zipf:  # the heavy point: one small user's load evicts the heavy one
        max_nodes = max(1_000, min(max_nodes, biggest - 1))
    env = {**common.provider_env(), "AUTH": "jwt", "JWT_SECRET": SECRET, "INDEX_MAX_NODES": str(max_nodes)}
    if args.preload_share is not None:
        env["INDEX_PRELOAD_SHARE"] = str(args.preload_share)
    folder = Path(tempfile.mkdtemp(prefix="bench-users-"))
    last: dict[str, float] = {}  # the previous process's last request of each user (time.monotonic)
    if snapshots:
        env["INDEX_SNAPSHOT_DIR"] = str(folder / "snapshots")
        server = Server(folder, args.threads, env)  # the previous life: every user once, each index snapshotted
        try:
            await server.wait_ready()
            client = Client(server, questions)
            # the sampled users last, the first of them last of all: the users active when the server stopped
            order = [ns for ns in point.users if ns not in point.measured] + point.measured[::-1]
            for ns in order:
                await client.call("query", ns, _sources(point, ns))
            await client.http.aclose()
            last = client.last
        finally:
            server.stop()  # SIGTERM: the app closes its Memory, which finishes the snapshot writes
    out: dict[str, Any] = {
        "point": point.name,
        "snapshots": snapshots,
        "users": len(point.users),
        "nodes": total,
        "nodes_per_user": round(total / len(point.users)),
        "measured_nodes": round(float(np.mean([point.nodes[ns] for ns in point.measured]))),
        "index_max_nodes": max_nodes,
    }
    lat: dict[str, list[float]] = {k: [] for k in ("cold_restart_context", "cold_restart_query")}
    lat.update({k: [] for k in ("warm_context", "warm_query", "cold_evicted_context", "cold_evicted_query")})
    lat.update({k: [] for k in ("preloaded_context", "preloaded_query")})
    for restart in range(args.restarts or point.restarts):
        launched = time.monotonic()
        server = Server(folder, args.threads, env)
        try:
            await server.wait_ready()
            client = Client(server, questions)
            out.setdefault("ready_s", []).append(round(time.monotonic() - launched, 2))
            if snapshots:
                out.setdefault("preload", []).append(await _preloaded(client, point.measured[0], launched))
            # the server's first call of each route (an empty namespace): what a start left for the first requests
            firsts = [await client.call(route, "user-warmup", 1) for route in ("query", "context")]
            out.setdefault("first_ms", [round(ms, 1) for ms in firsts])
            out.setdefault("rss_start_mib", proc_rss_mib(server.proc.pid))
            out.setdefault("rss_start_peak_mib", proc_peak_rss_mib(server.proc.pid))  # loading the model, at start
            out["rss_peak_reset"] = reset_peak_rss(server.proc.pid)  # "peak" below: while serving
            back = sorted(point.measured, key=lambda n: -last.get(n, 0.0))  # the users active last come back first
            for i, ns in enumerate(back):  # 1. cold after a restart, then warm
                first = ("context", "query")[(i + restart) % 2]
                before = await client.metrics(ns)
                ms = await client.call(first, ns, _sources(point, ns))
                loaded = (await client.metrics(ns))["loads"] > before["loads"]
                lat[f"cold_restart_{first}" if loaded else f"preloaded_{first}"].append(ms)
                if restart == 0:
                    for route in ("query", "context") * args.warm:
                        lat[f"warm_{route}"].append(await client.call(route, ns, _sources(point, ns)))
            if restart == 0:
                out["eviction"] = await _evictions(point, client, max_nodes, lat, point.passes or args.evictions)
                if point.zipf:
                    out["zipf"] = await _zipf(point, client, server, args)
            last = dict(client.last)
            out["rss_end_mib"] = proc_rss_mib(server.proc.pid)
            out["rss_peak_mib"] = proc_peak_rss_mib(server.proc.pid)
            await client.http.aclose()
        finally:
            server.stop()
    out["latency_ms"] = {k: percentiles(v) | {"n": len(v)} for k, v in lat.items() if v}
    out["rss_budget_mib"] = round(rss_budget(out["rss_start_mib"] or 0, point, max_nodes, args, snapshots))
    return out


async def _preloaded(client: Client, ns: str, launched: float, timeout: float = 300.0) -> dict[str, float]:
    """Wait for the start's preload to end (/metrics, polled every 50 ms); what it read back and when it ended:
    seconds from the process's launch (`launched`, time.monotonic) and the preload's own seconds."""
    deadline = time.monotonic() + timeout
    while (found := await client.metrics(ns))["preload_done"] < 1 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return {
        "done_s": round(time.monotonic() - launched, 2),
        "preload_s": round(found["preload_s"], 2),
        "namespaces": found["preloaded"],
        "nodes": found["preloaded_nodes"],
    }


def rss_budget(start: float, point: Point, max_nodes: int, args: argparse.Namespace, snapshots: bool) -> float:
    """What INDEX_MAX_NODES documents, MiB: the RSS at the first request, SERVING_MIB, NODE_KB a node held (the
    bound, or the largest namespace, which stays held while searched) and, on top, LOAD_KB a node of each namespace
    loading (its index included; NODE_KB when read from a snapshot), as many as requests in flight (--concurrency
    in Zipf, else one): an index over the bound is dropped once the load that passed it ends."""
    biggest = max(point.nodes.values())
    loading = min(len(point.users), args.concurrency if point.zipf else 1) * biggest
    kib = NODE_KB * max(max_nodes, biggest) + (NODE_KB if snapshots else LOAD_KB) * loading
    return start + SERVING_MIB + kib / 1024


async def _evictions(
    point: Point, client: Client, max_nodes: int, lat: dict[str, list[float]], passes: int
) -> dict[str, Any]:
    """Phase 2: the measured users (with others until the cycle's nodes exceed max_nodes) requested in turn, twice
    or more after a first that warms them: then each measured user's request finds its index evicted."""
    cycle = list(point.measured)
    others = [ns for ns in point.users if ns not in cycle]
    while (sum(point.nodes[ns] for ns in cycle) <= max_nodes or len(cycle) < 2) and others:
        cycle.append(others.pop(0))
    for ns in cycle:
        await client.call("query", ns, _sources(point, ns))
    before = await client.metrics(cycle[0])
    requests = 0
    for p in range(passes):  # the pass above warmed them: each request now finds its index evicted
        for i, ns in enumerate(cycle):
            route = ("context", "query")[(i + p) % 2]
            ms = await client.call(route, ns, _sources(point, ns))
            requests += 1
            if ns in point.measured:
                lat[f"cold_evicted_{route}"].append(ms)
    after = await client.metrics(cycle[0])
    return {"cycle_users": len(cycle), "requests": requests, "loads": int(after["loads"] - before["loads"])}


async def _zipf(point: Point, client: Client, server: Server, args: argparse.Namespace) -> dict[str, Any]:
    """Phase 3: args.zipf_seconds of Zipf traffic; latencies per route, loads, RSS samples. A closed loop
    (args.concurrency requests in flight, each sent when one returns: it measures the server saturated, where a
    request's latency is about concurrency / throughput) unless args.zipf_rate > 0: then an open loop, requests
    sent at Poisson arrivals of that mean rate whatever is in flight, each timed from its arrival (queueing
    counted), as users arrive at a deployment."""
    users = list(point.users)
    rng = random.Random(11)
    rng.shuffle(users)
    weights = 1 / np.arange(1, len(users) + 1) ** args.zipf_s
    cum = np.cumsum(weights / weights.sum())
    ms: dict[str, list[float]] = {"query": [], "context": []}
    spans: list[tuple[float, float]] = []  # each request's (start, end), time.perf_counter(): what overlapped it
    rss: list[float] = []
    before = await client.metrics(users[0])
    end = time.perf_counter() + args.zipf_seconds

    def draw(r: random.Random) -> tuple[str, str]:
        return users[int(np.searchsorted(cum, r.random()))], r.choice(("query", "context"))

    async def one(r: random.Random, due: float | None = None) -> None:
        ns, route = draw(r)
        took = await client.call(route, ns, _sources(point, ns), due)
        ms[route].append(took)
        now = time.perf_counter()
        spans.append((now - took / 1000, now))

    async def worker(seed: int) -> None:
        r = random.Random(seed)
        while time.perf_counter() < end:
            await one(r)

    async def arrivals() -> None:
        r = random.Random(100)
        sent: list[asyncio.Task[None]] = []
        due = time.perf_counter()
        while (due := due + r.expovariate(args.zipf_rate)) < end:
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            sent.append(asyncio.create_task(one(random.Random(r.random()), due)))
        await asyncio.gather(*sent)

    async def sampler() -> None:
        while time.perf_counter() < end:
            rss.append(proc_rss_mib(server.proc.pid) or 0.0)
            await asyncio.sleep(1.0)

    started = time.perf_counter()
    load = [arrivals()] if args.zipf_rate > 0 else [worker(100 + i) for i in range(args.concurrency)]
    await asyncio.gather(*load, sampler())
    wall = time.perf_counter() - started
    after = await client.metrics(users[0])
    both = ms["query"] + ms["context"]
    return {
        "seconds": round(wall, 1),
        "requests": len(both),
        "rate": round(len(both) / wall, 1),
        "offered_rate": args.zipf_rate or None,
        "all_ms": percentiles(both),
        "query_ms": percentiles(ms["query"]),
        "context_ms": percentiles(ms["context"]),
        "by_overlap_ms": by_overlap(spans),
        "loads": int(after["loads"] - before["loads"]),
        "held_nodes_end": int(after["nodes"]),
        "held_namespaces_end": int(after["namespaces"]),
        "rss_max_mib": round(max(rss), 1) if rss else None,
    }


def by_overlap(spans: list[tuple[float, float]]) -> dict[str, dict[str, float]]:
    """Latency percentiles (ms) of the requests by how many others were in flight at some point while each ran
    ("0": alone, "1", "2+"): whether a slow request was slow alone or beside others (the server's cores shared)."""
    groups: dict[str, list[float]] = {"0": [], "1": [], "2+": []}
    for i, (start, end) in enumerate(spans):
        beside = [(s, e) for k, (s, e) in enumerate(spans) if k != i and s < end and e > start]
        # the most in flight at once beside it: at each start within it (or its own start), those running then
        most = max(
            (sum(1 for s, e in beside if s <= t < e) for t in [start] + [s for s, _ in beside if s > start]), default=0
        )
        groups["0" if most == 0 else "1" if most == 1 else "2+"].append((end - start) * 1000)
    return {k: percentiles(v) | {"n": len(v)} for k, v in groups.items() if v}


# ---------------------------------------------------------------------------------------------- report
def _cell(p: dict | None, keys: tuple[str, ...] = ("p50", "p95", "p99")) -> str:
    if not p:
        return "-"
    return " / ".join(f"{p[k]:.0f}" if p[k] >= 100 else f"{p[k]:.1f}" for k in keys) + (
        f" (n={p['n']})" if "n" in p else ""
    )


def _traffic(args: dict[str, Any]) -> str:
    """How the Zipf phase sent its requests (bench/out/users.json's `args`), in words."""
    if args.get("zipf_rate"):
        return f"open loop, Poisson arrivals at {args['zipf_rate']:g} req/s offered, each timed from its arrival"
    return f"closed loop, {args['concurrency']} in flight"


def markdown(results: dict, header: str) -> str:
    """The `users` section of RESULTS.md."""
    lines = [
        "## Many users on one deployment",
        "",
        header,
        f"- provider: {results['datastore']}; elapsed: {results['elapsed_s']} s; load average (1 min) "
        f"{results['load_before']:.2f} before, {results['load_after']:.2f} after",
        "",
        "Each point: T users built by bench/synthetic.py (sealed chunks, their summaries and, except the 100k "
        "user, a line per message; nothing embedded), one real `python -m server.main` with AUTH=jwt (a token per "
        "user, its `sub` the namespace), INDEX_MAX_NODES about a fifth of the nodes. Cold after a restart: each "
        "sampled user's first request after the server started (/context and /query in turn); warm: the same "
        "user's next requests; cold after an eviction: users requested in a cycle larger than INDEX_MAX_NODES "
        "('loads' counts the index loads /metrics saw). Snapshots on: INDEX_SNAPSHOT_DIR set, the snapshots written "
        "by a previous server that requested every user once (a cold namespace is then read back from its file); "
        f"Zipf: {_traffic(results['args'])}, s={results['args']['zipf_s']}, half /query half /context. "
        "RSS: at the first request / peak while serving (the high-water mark reset then) / budget: what "
        "INDEX_MAX_NODES documents (models/settings.py): the first request's RSS + 40 MiB of serving + 3 KB a node "
        "held (INDEX_MAX_NODES, or the largest namespace) + 12 KB a node of each namespace being listed, on top "
        "(as many as requests in flight; 3 KB read from a snapshot). "
        "Latencies in ms (p50 / p95 / p99, n samples); the machine is shared (2 cores): upper "
        "bounds. 'First': the server's first /query and /context after it said it was ready (an empty namespace), "
        "in no user's figures. Preloaded: a sampled user whose first request after a restart found its index read "
        "back by the start's preload (INDEX_PRELOAD_SHARE), not in the cold columns; preload done: seconds from the "
        "process's launch to the preload's end (/metrics), with the namespaces it read.",
        "",
        "| point | snapshots | nodes/user | INDEX_MAX_NODES | cold /context after restart | "
        "cold /query after restart | "
        "warm /query | warm /context | cold /context after eviction | cold /query after eviction | "
        "eviction loads | Zipf all | Zipf /query | Zipf /context | Zipf req/s, loads | RSS start / peak / budget MiB | "
        "first /query, /context ms | preloaded: first /context, /query | preload done s (namespaces) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
        "| --- |",
    ]
    for r in results["points"]:
        lat = r["latency_ms"]
        z = r.get("zipf") or {}
        ev = r.get("eviction") or {}
        lines.append(
            "| "
            + " | ".join(
                [
                    r["point"],
                    "on" if r["snapshots"] else "off",
                    f"{r['measured_nodes']:,}",
                    f"{r['index_max_nodes']:,}",
                    _cell(lat.get("cold_restart_context")),
                    _cell(lat.get("cold_restart_query")),
                    _cell(lat.get("warm_query")),
                    _cell(lat.get("warm_context")),
                    _cell(lat.get("cold_evicted_context")),
                    _cell(lat.get("cold_evicted_query")),
                    f"{ev.get('loads', '-')} of {ev.get('requests', '-')}",
                    _cell(z.get("all_ms")),
                    _cell(z.get("query_ms")),
                    _cell(z.get("context_ms")),
                    f"{z['rate']}, {z['loads']}" if z else "-",
                    f"{r['rss_start_mib']:.0f} / {r['rss_peak_mib']:.0f} / {r['rss_budget_mib']}",
                    ", ".join(f"{ms:.0f}" for ms in r.get("first_ms", [])) or "-",
                    f"{_cell(lat.get('preloaded_context'))}; {_cell(lat.get('preloaded_query'))}",
                    ", ".join(f"{p['done_s']} ({p['namespaces']:.0f})" for p in r.get("preload", [])) or "-",
                ]
            )
            + " |"
        )
    overlap = [
        f"- {r['point']} ({'snapshots' if r['snapshots'] else 'no snapshots'}): "
        + "; ".join(f"{_OVERLAP[k]} {_cell(v)}" for k, v in r["zipf"].get("by_overlap_ms", {}).items())
        for r in results["points"]
        if r.get("zipf", {}).get("by_overlap_ms")
    ]
    if overlap:
        lines += ["", "Zipf latency (ms, p50 / p95 / p99) by the most requests in flight beside each one:", *overlap]
    return "\n".join(lines) + "\n"


_OVERLAP = {"0": "alone", "1": "beside one other", "2+": "beside two or more"}


async def _run(args: argparse.Namespace) -> dict:
    questions = [q.text for s in dataset.load() for q in dataset.questions(s, s["sample_id"])]
    random.Random(0).shuffle(questions)
    results: dict[str, Any] = {"datastore": args.datastore, "args": vars(args), "points": []}
    results["load_before"] = _load()
    started = time.perf_counter()
    modes = {"off": (False,), "on": (True,), "both": (False, True)}[args.snapshots]
    with common.datastore(args.datastore):
        chosen = points(args.quick, args.heavy_chunks or (10_000 if args.quick else 100_000))
        if args.heavy_only:
            chosen = chosen[-1:]
        if args.point:
            chosen = [p for p in chosen if args.point in p.name]
        for point in chosen:
            build_s = build(point)
            for snapshots in modes:
                found = await run_point(point, args, questions, snapshots)
                found["build_s"] = round(build_s, 1)
                results["points"].append(found)
                print(json.dumps(found), flush=True)
    results["elapsed_s"] = round(time.perf_counter() - started, 1)
    results["load_after"] = _load()
    return results


def _load() -> float:
    import os

    return os.getloadavg()[0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.users", description=__doc__.splitlines()[0])
    common.datastore_argument(parser)
    parser.add_argument("--quick", action="store_true", help="small points, a short Zipf phase (~2 minutes)")
    parser.add_argument("--heavy-chunks", type=int, help="chunks of the heavy user (default 100000; quick 10000)")
    parser.add_argument("--zipf-seconds", type=float, help="seconds of Zipf traffic per point (default 60; quick 10)")
    parser.add_argument("--zipf-s", type=float, default=1.0, help="Zipf exponent (default %(default)s)")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight in the Zipf phase")
    parser.add_argument(
        "--zipf-rate",
        type=float,
        default=0.0,
        help="an open loop in the Zipf phase: Poisson arrivals at this many requests a second (default: closed loop)",
    )
    parser.add_argument("--warm", type=int, default=5, help="warm requests of each route per sampled user")
    parser.add_argument("--evictions", type=int, default=3, help="passes of the eviction cycle (the first warms)")
    parser.add_argument(
        "--snapshots",
        choices=("off", "on", "both"),
        default="both",
        help="run each point without index snapshots, with them (INDEX_SNAPSHOT_DIR), or both (default)",
    )
    parser.add_argument("--heavy-only", action="store_true", help="only the heavy point (section users-heavy)")
    parser.add_argument("--point", help="only the points whose name holds this text (e.g. '20 users'); a check")
    parser.add_argument("--threads", type=int, default=2, help="EMBED_THREADS of the server")
    parser.add_argument(
        "--preload-share", type=float, help="INDEX_PRELOAD_SHARE of the server (default: the setting's; 0 = off)"
    )
    parser.add_argument("--restarts", type=int, help="restarts measured per point (default: the point's, 1)")
    parser.add_argument("--write-results", action="store_true", help="replace the users section of RESULTS.md")
    args = parser.parse_args(argv)
    if args.point and args.write_results:
        parser.error("--point runs a part of the section: it cannot --write-results")
    if args.zipf_seconds is None:
        args.zipf_seconds = 10.0 if args.quick else 60.0
    (common.OUT / "users").mkdir(parents=True, exist_ok=True)
    results = asyncio.run(_run(args))
    (common.OUT / "users.json").write_text(json.dumps(results, indent=1))
    command = ".venv/bin/python -m bench.users" + "".join(
        f" {a}"
        for a, on in (
            (f"--datastore {args.datastore}", True),
            ("--quick", args.quick),
            (f"--heavy-chunks {args.heavy_chunks}", args.heavy_chunks),
            (f"--snapshots {args.snapshots}", args.snapshots != "both"),
            ("--heavy-only", args.heavy_only),
            (f"--point '{args.point}'", args.point),
            (f"--zipf-seconds {args.zipf_seconds:g}", args.zipf_seconds != (10.0 if args.quick else 60.0)),
            (f"--zipf-rate {args.zipf_rate:g}", args.zipf_rate > 0),
            (f"--concurrency {args.concurrency}", args.concurrency != 4),
            (f"--preload-share {args.preload_share}", args.preload_share is not None),
            (f"--restarts {args.restarts}", args.restarts),
            ("--write-results", args.write_results),
        )
        if on
    )
    report = markdown(results, common.header(command))
    print(report)
    if args.write_results:
        common.write_section("users-heavy" if args.heavy_only else "users", report)


if __name__ == "__main__":
    main()
