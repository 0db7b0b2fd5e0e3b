"""Wrappers that count what the pipeline asks of its embedder and summariser, and process memory readings."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from services.embedding import Embedder
from services.summarising import Span, Summariser, Summary
from services.tokens import count_tokens


class CountingEmbedder:
    """Delegates to `inner`; counts calls, texts, word pieces and seconds spent embedding.

    pieces: texts -> the word pieces the model reads of them (`minilm_pieces` for the local model); None counts
    none. Unlike seconds, the texts and pieces a run sends do not depend on the machine's load.
    """

    def __init__(self, inner: Embedder, pieces: Callable[[list[str]], int] | None = None) -> None:
        self.inner = inner
        self.model_name = inner.model_name
        self.dimension = inner.dimension
        self.calls = self.texts = self.pieces = 0
        self.seconds = 0.0
        self._count_pieces = pieces

    def close(self) -> None:
        """Close the inner embedder."""
        self.inner.close()

    def embed(self, texts: list[str], *, bulk: bool = False) -> np.ndarray:
        """The inner embedder's vectors, (len(texts), dimension) float32."""
        t = time.perf_counter()
        out = self.inner.embed(texts, bulk=bulk)
        self.seconds += time.perf_counter() - t
        self.calls += 1
        self.texts += len(texts)
        if self._count_pieces is not None:
            self.pieces += self._count_pieces(texts)
        return out


def minilm_pieces() -> Callable[[list[str]], int]:
    """texts -> the word pieces all-MiniLM-L6-v2 reads of them ([CLS] and [SEP] included, each text truncated at
    256 as the local embedder does): its time grows with them (~0.38 ms a piece on one core, bench/RESULTS.md)."""
    from services.embedders.onnx_minilm import load_tokenizer

    tokenizer = load_tokenizer()
    return lambda texts: sum(len(e.ids) for e in tokenizer.encode_batch(texts)) if texts else 0


class CountingSummariser:
    """Delegates to `inner`; counts calls, tokens sent (children's texts plus context) and seconds."""

    def __init__(self, inner: Summariser) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls = self.tokens_in = 0
        self.seconds = 0.0

    def summarise(self, span: Span, max_tokens: int) -> Summary:
        """The inner summariser's summary of `span` (tokens in: the children's texts plus the context's)."""
        self.calls += 1
        self.tokens_in += sum(count_tokens(t) for t in span.texts) + (count_tokens(span.context or ""))
        t = time.perf_counter()
        out = self.inner.summarise(span, max_tokens)
        self.seconds += time.perf_counter() - t
        return out


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, MiB: VmHWM, which (unlike getrusage's ru_maxrss, kept
    across exec on Linux) starts afresh in a child process."""
    return proc_peak_rss_mib(os.getpid()) or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def proc_peak_rss_mib(pid: int) -> float | None:
    """VmHWM (peak RSS) of a process, MiB; None when it is gone."""
    return proc_status_mib(pid, "VmHWM")


def reset_peak_rss(pid: int) -> bool:
    """Start the process's VmHWM again from its RSS now (Linux: `5` into /proc/<pid>/clear_refs), so a later
    `proc_peak_rss_mib` is the peak since; False when the kernel or the permissions refuse."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def proc_rss_mib(pid: int) -> float | None:
    """VmRSS (current RSS) of a process, MiB; None when it is gone."""
    return proc_status_mib(pid, "VmRSS")


def proc_status_mib(pid: int, key: str) -> float | None:
    """A memory line (kB) of /proc/<pid>/status in MiB; None when the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def percentiles(ms: list[float]) -> dict[str, float]:
    """p50/p95/p99/mean of latencies in milliseconds (rounded to 0.01)."""
    a = np.asarray(ms, dtype=np.float64)
    return {
        "n": len(ms),
        "p50": round(float(np.percentile(a, 50)), 2),
        "p95": round(float(np.percentile(a, 95)), 2),
        "p99": round(float(np.percentile(a, 99)), 2),
        "mean": round(float(a.mean()), 2),
    }
