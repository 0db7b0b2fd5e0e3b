"""The embedders' parts: the ONNX MiniLM model, the priority scheduler, OpenAI's embeddings API (the openai extra),
the optional sentence-transformers model.

Nothing here imports onnxruntime, tokenizers, openai or torch at import time: models and clients load on first use.
"""
