"""Prometheus metrics at `GET /metrics`, in the text exposition format (prometheus-client), behind the same auth as
the API (a bearer token or a JWT; no auth only where AUTH=none). METRICS_ENABLED=false removes the route.

Each app has a registry of its own (`Metrics.registry`, never the library's global one), so several apps in one
process (the tests, a library user) count apart. What it exports:

- `pyramind_http_requests_total{method, route, status}` and `pyramind_http_request_duration_seconds{...}` (a
  histogram, from the request's arrival to the last byte of its answer): every HTTP request, /mcp included.
  `route` is the route's rule (`/memories/<string:memory_id>`), never the raw path, so the labels stay few; a
  path no route matches is `<unmatched>`.
- `pyramind_indexing_backlog_sources{lane}`, `pyramind_indexing_backlog_tokens`, `pyramind_indexing_lag_seconds`
  and `pyramind_indexing_failures_total{code}`: the background indexer's backlog and how long its oldest source
  has waited to become searchable (datastore/indexing/background.py, `IndexingState`).
- `pyramind_index_namespaces`, `pyramind_index_nodes` and `pyramind_index_max_nodes`: the in-memory search indexes
  held now (datastore/indexes/namespaces.py) and their bound (INDEX_MAX_NODES).
- `pyramind_index_load_seconds{kind}`: a histogram of index loads (`load`: a namespace read whole from the store,
  its first search after a start or an eviction), refreshes (`refresh`: the sources changed since) and preloads
  (`preload`: one read back by the start's preload).
- `pyramind_index_preloaded_namespaces`, `pyramind_index_preloaded_nodes`, `pyramind_index_preload_seconds` and
  `pyramind_index_preload_done`: what the start's preload of snapshots (INDEX_PRELOAD_SHARE) read back so far, its
  seconds from its start to now or to its end, and 1 once it ended (also when there is none).
- `pyramind_store_errors_total{where, code}`: store errors (StoreError and its kinds, e.g. `store_unavailable`)
  that ended a REST request (`where="request"`; an MCP tool call answers its error inside a 200) or an indexing
  step (`where="indexing"`).
- `process_*`: the server process's memory (resident bytes), CPU seconds and open files.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter as Tally
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from quart import Blueprint, Quart, Response, current_app, request
from quart_schema import hide

from services.errors import PyramindError, StoreError

ROUTE_KEY = "pyramind.route"  # the matched rule, left in the ASGI scope by the app for the middleware
UNMATCHED = "<unmatched>"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
LOAD_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def _store_codes() -> frozenset[str]:
    """The error codes of StoreError and its subclasses (`store_error`, `store_unavailable`, ...)."""
    codes, todo = set(), [StoreError]
    while todo:
        cls = todo.pop()
        codes.add(cls.code)
        todo += cls.__subclasses__()
    return frozenset(codes)


STORE_CODES = _store_codes()


class Metrics:
    """One app's metrics: its own registry, the request counters, and a collector reading the indexer and the
    in-memory indexes of `app` at each scrape."""

    def __init__(self, app: Quart) -> None:
        self.app = app
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "pyramind_http_requests",
            "HTTP requests answered, by method, route rule and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "pyramind_http_request_duration_seconds",
            "Seconds from a request's arrival to the end of its answer, by method, route rule and status.",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.index_loads = Histogram(
            "pyramind_index_load_seconds",
            "Seconds to load a namespace's in-memory index from the store (kind=load), refresh it (kind=refresh) "
            "or preload it at the start (kind=preload).",
            ["kind"],
            buckets=LOAD_BUCKETS,
            registry=self.registry,
        )
        self.store_errors: Tally[str] = Tally()  # by code, of requests; the indexer counts its own
        self._guard = threading.Lock()
        self.registry.register(LiveState(self))
        ProcessCollector(registry=self.registry)

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one answered request and its latency (seconds)."""
        labels = (method, route, str(status))
        self.requests.labels(*labels).inc()
        self.latency.labels(*labels).observe(seconds)

    def index_loaded(self, kind: str, seconds: float) -> None:
        """NamespaceIndexes.on_load: one index load or refresh that took `seconds`."""
        self.index_loads.labels(kind).observe(seconds)

    def request_failed(self, err: PyramindError) -> None:
        """Count a request ended by a domain error when it is a store error (STORE_CODES)."""
        if isinstance(err, StoreError):
            with self._guard:
                self.store_errors[err.code] += 1

    def request_store_errors(self) -> dict[str, int]:
        """{code: count} of the requests a store error ended so far."""
        with self._guard:
            return dict(self.store_errors)

    def exposition(self, accept: str | None) -> tuple[bytes, str]:
        """(body, content type) of a scrape: the text format, or OpenMetrics when `accept` asks for it."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type

    def asgi(self, inner: Any) -> Any:
        """Wrap the app's ASGI callable (outermost, so /mcp is measured too): time each HTTP request to the end of
        its answer and count it under the route rule the app left in the scope (ROUTE_KEY)."""

        async def measured(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await inner(scope, receive, send)
                return
            started = time.perf_counter()
            status = 500  # when the app fails before it answers

            async def sending(message: dict[str, Any]) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = int(message["status"])
                await send(message)

            try:
                await inner(scope, receive, sending)
            finally:
                self.observe(scope.get("method", "GET"), route_of(scope), status, time.perf_counter() - started)

        return measured


def route_of(scope: dict[str, Any]) -> str:
    """The route label of a request: the rule the app matched, `/mcp` for the MCP endpoint, else UNMATCHED."""
    rule = scope.get(ROUTE_KEY)
    if rule:
        return str(rule)
    path = str(scope.get("path", ""))
    if path == "/mcp" or path.startswith("/mcp/"):
        return "/mcp"
    return UNMATCHED


class LiveState(Collector):
    """The gauges read at each scrape: the indexer's backlog and lag, the in-memory indexes, store errors."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Metric]:
        return list(self._families(None, None))

    def collect(self) -> Iterator[Metric]:
        ext = self.metrics.app.extensions
        return self._families(ext.get("pyramind.indexer"), ext.get("pyramind.memory"))

    def _families(self, indexer: Any, memory: Any) -> Iterator[Metric]:
        state = indexer.state() if indexer is not None else None
        lanes = GaugeMetricFamily(
            "pyramind_indexing_backlog_sources",
            "Sources waiting in the background indexer: lane=chunks (not yet searchable), lane=summaries.",
            labels=["lane"],
        )
        lanes.add_metric(["chunks"], state.chunk_sources if state else 0)
        lanes.add_metric(["summaries"], state.summary_sources if state else 0)
        yield lanes
        yield GaugeMetricFamily(
            "pyramind_indexing_backlog_tokens",
            "Estimated tokens accepted but not yet searchable.",
            value=state.backlog_tokens if state else 0,
        )
        yield GaugeMetricFamily(
            "pyramind_indexing_lag_seconds",
            "Seconds the oldest source waiting to become searchable has waited (0 when none waits).",
            value=state.lag_seconds if state else 0.0,
        )
        failures = CounterMetricFamily(
            "pyramind_indexing_failures", "Failed indexing steps and backlog scans, by error code.", labels=["code"]
        )
        for code, n in sorted((state.failures if state else {}).items()):
            failures.add_metric([code], n)
        yield failures
        held: dict[str, int] = memory.search.indexes.held() if memory is not None else {}
        yield GaugeMetricFamily(
            "pyramind_index_namespaces", "Namespaces whose search index is held in memory.", value=len(held)
        )
        yield GaugeMetricFamily(
            "pyramind_index_nodes", "Nodes held in the in-memory search indexes.", value=sum(held.values())
        )
        yield from self._preload(memory)
        settings = self.metrics.app.extensions.get("pyramind.settings")
        yield GaugeMetricFamily(
            "pyramind_index_max_nodes",
            "INDEX_MAX_NODES: nodes the in-memory indexes hold at most.",
            value=settings.index_max_nodes if settings is not None else 0,
        )
        errors = CounterMetricFamily(
            "pyramind_store_errors",
            "Store errors that ended a request (where=request) or an indexing step (where=indexing), by code.",
            labels=["where", "code"],
        )
        for code, n in sorted(self.metrics.request_store_errors().items()):
            errors.add_metric(["request", code], n)
        for code, n in sorted((state.failures if state else {}).items()):
            if code in STORE_CODES:
                errors.add_metric(["indexing", code], n)
        yield errors

    @staticmethod
    def _preload(memory: Any) -> Iterator[Metric]:
        """The gauges of the start's preload (NamespaceIndexes.preload_state)."""
        state = memory.search.indexes.preload_state() if memory is not None else None
        yield GaugeMetricFamily(
            "pyramind_index_preloaded_namespaces",
            "Namespaces whose index the start's preload read back from a snapshot.",
            value=state.namespaces if state else 0,
        )
        yield GaugeMetricFamily(
            "pyramind_index_preloaded_nodes",
            "Nodes the start's preload read back.",
            value=state.nodes if state else 0,
        )
        yield GaugeMetricFamily(
            "pyramind_index_preload_seconds",
            "Seconds the start's preload has run (to its end once done).",
            value=state.seconds if state else 0.0,
        )
        yield GaugeMetricFamily(
            "pyramind_index_preload_done",
            "1 once the start's preload ended (or there is none), else 0.",
            value=1 if state is None or state.done else 0,
        )


metrics_api = Blueprint("metrics", __name__)  # not an API operation for a GPT: hidden from the OpenAPI document


@metrics_api.get("/metrics")
@hide
async def metrics() -> Response:
    """The server's metrics in the Prometheus text format (OpenMetrics when the Accept header asks for it).

    Authenticated like the API: 401 without a valid token (AUTH=bearer or jwt). See the module docstring for
    each metric, its labels and units (seconds, tokens, nodes).
    """
    found: Metrics = current_app.extensions["pyramind.metrics"]
    body, content_type = await asyncio.to_thread(found.exposition, request.headers.get("Accept"))
    return Response(body, status=200, content_type=content_type)


def install_metrics(app: Quart) -> Metrics:
    """Give `app` its metrics: the /metrics route, the route rule of each request left in its ASGI scope, and
    the index-load hook on the Memory once it is open. Call it before `measure` wraps the app's ASGI callable."""
    found = Metrics(app)
    app.extensions["pyramind.metrics"] = found
    app.register_blueprint(metrics_api)

    @app.after_request
    async def _route(response: Response) -> Response:
        rule = request.url_rule
        scope: dict[str, Any] = request.scope  # type: ignore[assignment]  # the ASGI scope the middleware reads
        scope[ROUTE_KEY] = rule.rule if rule is not None else None
        return response

    return found


def note_error(err: PyramindError) -> None:
    """Count a domain error that ended the current request in the app's metrics (a store error is counted;
    nothing happens without metrics)."""
    found: Metrics | None = current_app.extensions.get("pyramind.metrics")
    if found is not None:
        found.request_failed(err)


def hook_memory(app: Quart, memory: Any) -> None:
    """Point the Memory's in-memory indexes at this app's metrics (their loads and refreshes); a no-op when the
    app has no metrics (METRICS_ENABLED=false). One hook per Memory: a Memory shared by several apps (tests)
    reports its loads to the last app made over it."""
    found: Metrics | None = app.extensions.get("pyramind.metrics")
    if found is not None:
        memory.search.indexes.on_load = found.index_loaded
