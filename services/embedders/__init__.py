"""The local embedders' parts: the ONNX MiniLM model, the priority scheduler, the optional sentence-transformers model.

Nothing here imports onnxruntime, tokenizers or torch at import time: models load on first use.
"""
