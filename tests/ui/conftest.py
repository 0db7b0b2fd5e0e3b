"""Browser fixtures: the real server (`python -m server.main`, hypercorn on a free loopback port) over a SQLite
store seeded with real data, and Debian's chromium driven headless by Playwright (its Python package talks to the
system browser at /usr/bin/chromium; no browser is downloaded).

Without chromium or Playwright the browser tests are skipped, and fail under CI (CI=true), where
`scripts/setup.sh dev` installs both.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from datastore.factory import open_memory
from models.api import Document, RememberRequest
from services.embedding import LocalEmbedder
from services.summarising import ExtractiveSummariser
from tests.support.settings import TOKEN, make_settings
from tests.support.stores import unavailable
from tests.support.synthetic import conversation, document_text
from tests.trust.harness import ServerProcess

# flags that keep a headless chromium quiet on a machine without internet (no background fetches, no updates)
# and working in a container (no sandbox, no GPU, no reliance on a large /dev/shm)
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-dev-shm-usage",
]
LONG = "long-talk"  # 180 messages: 27 chunks, 5 L2 summaries, 1 L3
LONG_MESSAGES = 180
SHORT_TITLE = "Cy and Di <b>catch up</b>"  # a title (RememberRequest.title), shown as text, never as markup


def seed(db: Path, embedder: LocalEmbedder) -> None:
    """The data every browser test sees (namespace `default`)."""
    memory = open_memory(make_settings(db.parent, local_db_path=db), embedder, ExtractiveSummariser())
    try:
        start = datetime(2024, 1, 1, 9, 0, tzinfo=UTC)
        msgs = conversation(("Ann", "Bob"), LONG_MESSAGES, start=start)
        for i in range(0, len(msgs), 60):
            memory.writer.remember("default", RememberRequest(conversation_id=LONG, messages=msgs[i : i + 60]))
        memory.writer.remember(
            "default",
            RememberRequest(
                conversation_id="short-chat", title=SHORT_TITLE, messages=conversation(("Cy", "Di"), 4, prefix="s")
            ),
        )
        memory.writer.remember(
            "default",
            RememberRequest(conversation_id="to-delete", messages=conversation(("Eve", "Fay"), 12, prefix="d")),
        )
        memory.writer.upsert("default", [Document(id="garden-notes", text=document_text(6, "garden"))])
        memory.writer.remember(
            "elsewhere",
            RememberRequest(conversation_id="secret-talk", messages=conversation(("Xan", "Yul"), 3, prefix="x")),
        )
    finally:
        memory.close()


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory, embedder: LocalEmbedder) -> Iterator[ServerProcess]:
    base = tmp_path_factory.mktemp("ui-server")
    db = base / "pyramind.db"
    seed(db, embedder)
    server = ServerProcess(db, base / "server.log").start()
    try:
        yield server
    finally:
        server.stop()


# module scope, not session: Playwright's sync API holds an event loop in this thread while it is open, and
# pytest-asyncio's async tests in later modules cannot run their loop meanwhile
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        unavailable("chromium is not installed (scripts/setup.sh dev installs it as root: apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright package is missing (pip install -e '.[dev]')")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


class Page:
    """A fresh browser tab (its own sessionStorage) on the live server that records what went wrong: uncaught
    page errors and any request to a host other than the server (there must be none: no CDN)."""

    def __init__(self, browser: Any, server: ServerProcess) -> None:
        self.url = server.url
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.page = self.context.new_page()
        self.page.set_default_timeout(20_000)
        self.errors: list[str] = []
        self.outside: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.context.route("**/*", self._only_loopback)

    def _only_loopback(self, route: Any) -> None:
        if route.request.url.startswith(self.url):
            route.continue_()
        else:
            self.outside.append(route.request.url)
            route.abort()

    def open(self, path: str = "/ui/") -> Any:
        self.page.goto(self.url + path)
        self.page.wait_for_selector("body[data-ready]")
        return self.page

    def login(self, token: str = TOKEN) -> Any:
        page = self.open()
        page.fill("#token", token)
        page.click("#login-submit")
        return page


@pytest.fixture
def tab(browser: Any, live_server: ServerProcess) -> Iterator[Page]:
    t = Page(browser, live_server)
    try:
        yield t
        assert t.errors == [], f"uncaught errors in the page: {t.errors}"
        assert t.outside == [], f"the page reached outside the server: {t.outside}"
    finally:
        t.context.close()
