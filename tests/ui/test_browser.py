"""The web page in a real browser (Debian's chromium, headless) against the real server with real data.

Each test opens a fresh tab, signs in with the token as a user would, and checks what the page shows; the tab
fixture fails a test on any uncaught page error or any request leaving the server (no CDN).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import httpx
import pytest

from datastore.factory import open_memory
from models.api import RememberRequest
from services.summarising import ExtractiveSummariser
from tests.support.settings import TOKEN, make_settings
from tests.support.synthetic import conversation
from tests.trust.harness import ServerProcess
from tests.ui.conftest import LONG, SHORT_TITLE, Page

AUTH = {"Authorization": f"Bearer {TOKEN}"}
ROOT = Path(__file__).resolve().parents[2]


def open_long_conversation(tab: Page):
    page = tab.login()
    page.wait_for_selector("#sources tbody tr[data-source-id]")
    page.click(f"tr[data-source-id='{LONG}'] a.source-link")
    page.wait_for_selector("#tree .node")
    return page


def expand(card) -> None:
    card.locator(":scope > .node-actions > button.expand").click()
    card.locator(":scope > .children > .node").first.wait_for()


def test_only_the_sign_in_is_offered_until_signed_in(tab: Page) -> None:
    """Issue 27, item 5: before signing in, the page offered its navigation links (`header nav` was shown by its
    CSS despite `hidden`); now the only thing to do is sign in, and the links appear after it."""
    page = tab.open()
    page.wait_for_selector("#login")
    visible = [a.inner_text() for a in page.locator("a").all() if a.is_visible()]
    assert visible == [] and page.locator("#nav").is_hidden() and page.locator("#logout").is_hidden()
    page.fill("#token", TOKEN)
    page.click("#login-submit")
    page.wait_for_selector("#sources tbody tr[data-source-id]")
    assert page.locator("a[data-nav='search']").is_visible() and page.locator("#logout").is_visible()


def test_a_wrong_token_shows_an_error_in_words(tab: Page) -> None:
    page = tab.login("not-the-token")
    error = page.locator("#error")
    error.wait_for(state="visible")
    assert "refused the token" in error.inner_text() and "invalid bearer token" in error.inner_text()
    assert page.locator("#login").is_visible()  # still the sign-in form, not a blank page
    assert page.evaluate("sessionStorage.getItem('pyramind.token')") is None

    page.fill("#token", TOKEN)  # the right token then works
    page.click("#login-submit")
    page.wait_for_selector("#sources tbody tr[data-source-id]")
    assert page.locator("#error").is_hidden()
    assert TOKEN not in page.url


def test_list_shows_sources_with_time_ranges_and_counts(tab: Page) -> None:
    page = tab.login()
    page.wait_for_selector("#sources tbody tr[data-source-id]")
    ids = page.locator("#sources tbody tr").evaluate_all("rows => rows.map(r => r.dataset.sourceId)")
    assert {LONG, "short-chat", "garden-notes"} <= set(ids) and "secret-talk" not in ids  # another namespace
    row = page.locator(f"tr[data-source-id='{LONG}']").inner_text()
    assert "2024-01-01 09:00" in row and "180" in row and "L3: 1" in row
    counted = re.search(r"L2: (\d+) · L1: (\d+)", row)  # every 5 sealed chunks have their summary
    assert counted is not None and int(counted[1]) == 5 and 25 <= int(counted[2]) < 30
    assert "document" in page.locator("tr[data-source-id='garden-notes']").inner_text()
    short = page.locator("tr[data-source-id='short-chat']")
    assert SHORT_TITLE in short.inner_text() and "short-chat" in short.inner_text()  # the title, then the id
    assert short.locator("b").count() == 0
    # the optional panels show exactly when the server documents their endpoints (404 elsewhere: hidden)
    paths = httpx.get(tab.url + "/openapi.json").json()["paths"]
    assert page.locator("a[data-nav='context']").is_visible() == ("/context" in paths)
    assert page.locator("a[data-nav='core']").is_visible() == ("/core" in paths)


def test_browse_from_an_l3_summary_down_to_a_chunk_and_its_messages(tab: Page) -> None:
    page = open_long_conversation(tab)
    assert "180 messages" in page.locator(".meta").inner_text()
    l3 = page.locator("#tree > .node").first
    assert l3.get_attribute("data-level") == "3"
    head = l3.locator(":scope > .node-head").inner_text()
    assert "L3" in head and "Ann, Bob" in head and "2024-01-01 09:00" in head
    expand(l3)
    l2s = l3.locator(":scope > .children > .node")
    assert l2s.count() == 5 and {l2s.nth(i).get_attribute("data-level") for i in range(5)} == {"2"}
    expand(l2s.first)
    l1s = l2s.first.locator(":scope > .children > .node")
    assert l1s.count() == 5 and l1s.first.get_attribute("data-level") == "1"
    chunk = l1s.first
    assert "[2024-01-01 09:00] Ann:" in chunk.locator(".node-text").inner_text()
    chunk.locator("button.show-messages").click()
    messages = chunk.locator("li.message")
    messages.first.wait_for()
    assert messages.first.get_attribute("data-message-id") == "m-0"
    assert "About garden" in messages.first.inner_text() and "Ann" in messages.first.inner_text()

    shot = os.environ.get("PYRAMIND_UI_SCREENSHOT")  # set to docs/ui-tree.png to refresh the README's picture
    page.evaluate("window.scrollTo(0, 0)")
    png = page.screenshot(full_page=True, clip={"x": 0, "y": 0, "width": 1280, "height": 1250})
    assert len(png) > 10_000
    if shot:
        (ROOT / shot).write_bytes(png)


def test_search_finds_memories_and_links_into_the_tree(tab: Page) -> None:
    page = tab.login()
    page.wait_for_selector("#sources tbody tr[data-source-id]")
    page.click("a[data-nav='search']")
    page.fill("#q", "the sourdough starter doubled overnight")
    page.select_option("#mode", "dense")
    page.fill("#top-k", "5")
    page.click("#search-form details summary")
    page.fill("#f-conversation_id", LONG)
    page.fill("#f-min_level", "2")
    page.click("#search-submit")
    results = page.locator("#results li.result")
    results.first.wait_for()
    assert 1 <= results.count() <= 5
    levels = results.evaluate_all("rs => rs.map(r => r.className)")
    assert all("level-1" not in c for c in levels)  # min_level 2: summaries only
    target = results.first.get_attribute("data-node-id")
    results.first.locator("a.in-tree").click()
    highlighted = page.locator("#tree .node.highlight")
    highlighted.wait_for()
    assert highlighted.get_attribute("data-node-id") == target
    assert page.locator("#tree > .node").first.get_attribute("data-level") == "3"

    page.click("a[data-nav='search']")  # a bad filter is an error in words, not a blank page
    page.fill("#q", "anything")
    page.fill("#f-min_level", "3")
    page.fill("#f-max_level", "2")
    page.click("#search-submit")
    page.locator("#error").wait_for(state="visible")
    assert "min_level must not exceed max_level" in page.locator("#error").inner_text()


def test_delete_a_message_after_a_confirmation_and_see_it_gone(tab: Page, live_server: ServerProcess) -> None:
    page = open_long_conversation(tab)
    l3 = page.locator("#tree > .node").first
    expand(l3)
    l2 = l3.locator(":scope > .children > .node").first
    expand(l2)
    chunk = l2.locator(":scope > .children > .node").nth(1)
    chunk_id = chunk.get_attribute("data-node-id")
    chunk.locator("button.show-messages").click()
    victim = chunk.locator("li.message").nth(2)
    victim.wait_for()
    message_id = victim.get_attribute("data-message-id")
    content = victim.locator(".message-text").inner_text()

    victim.locator("button.delete-message").click()  # cancel first: nothing changes
    page.locator("#confirm").wait_for(state="visible")
    page.click("#confirm-cancel")
    assert page.locator(f"li.message[data-message-id='{message_id}']").count() == 1

    victim.locator("button.delete-message").click()
    dialog = page.locator("#confirm")
    dialog.wait_for(state="visible")
    text = dialog.inner_text()
    assert f"Delete message {message_id}?" in text and "rebuilt" in text and chunk_id in text
    assert "L2" in text and "L3" in text  # the summaries above it are named
    page.click("#confirm-ok")
    page.locator("#notice").wait_for(state="visible")
    assert f"Forgot message {message_id}" in page.locator("#notice").inner_text()

    # the tree is redrawn; walk down again: the message is in no chunk's message list and no node's text
    page.wait_for_selector("#tree > .node")
    l3 = page.locator("#tree > .node").first
    if l3.locator(":scope > .children > .node").count() == 0:
        expand(l3)
    l2 = l3.locator(":scope > .children > .node").first
    if l2.locator(":scope > .children > .node").count() == 0:
        expand(l2)
    for i in range(l2.locator(":scope > .children > .node").count()):
        card = l2.locator(":scope > .children > .node").nth(i)
        if card.locator("li.message").count() == 0:
            card.locator("button.show-messages").click()
            card.locator("li.message").first.wait_for()
    assert page.locator(f"li.message[data-message-id='{message_id}']").count() == 0
    assert page.locator("li.message").count() > 20
    assert content not in page.locator("#tree").inner_text()
    r = httpx.get(f"{live_server.url}/conversations/{LONG}", headers=AUTH)
    assert r.json()["conversation"]["message_count"] == 179


def test_delete_a_conversation_says_nothing_is_rebuilt(tab: Page, live_server: ServerProcess) -> None:
    page = tab.login()
    page.wait_for_selector("tr[data-source-id='to-delete']")
    page.locator("tr[data-source-id='to-delete'] button.danger").click()
    dialog = page.locator("#confirm")
    dialog.wait_for(state="visible")
    assert "12 messages" in dialog.inner_text() and "Nothing needs rebuilding" in dialog.inner_text()
    page.click("#confirm-ok")
    page.locator("#notice").wait_for(state="visible")
    page.wait_for_selector(f"tr[data-source-id='{LONG}']")
    assert page.locator("tr[data-source-id='to-delete']").count() == 0
    assert httpx.get(f"{live_server.url}/conversations/to-delete", headers=AUTH).status_code == 404


def test_swagger_ui_renders_offline(tab: Page) -> None:
    page = tab.page
    page.goto(tab.url + "/docs")
    page.wait_for_selector(".swagger-ui .opblock")
    assert page.locator(".opblock-summary-path", has_text="/conversations").count() >= 1
    assert page.locator(".opblock-summary-path", has_text="/remember").count() == 1


# ---------------------------------------------------------------------- panels of endpoints other branches add
# The page shows these only when the server documents the endpoint; on a server without it the tests skip (the
# list test above checks that the panel is then hidden).
def _needs(tab: Page, path: str) -> None:
    if not any(p.endswith(path) for p in httpx.get(tab.url + "/openapi.json").json()["paths"]):
        pytest.skip(f"this server has no {path} endpoint (its panel is hidden)")


def test_core_memory_panel_saves_and_deletes_an_entry(tab: Page) -> None:
    _needs(tab, "/core")
    page = tab.login()
    page.wait_for_selector("#sources tbody tr[data-source-id]")
    page.click("a[data-nav='core']")
    page.fill("#core-key", "favourite_colour")
    page.fill("#core-value", "teal")
    page.fill("#core-importance", "80")
    page.click("#core-form button[type='submit']")
    row = page.locator("#core tr[data-key='favourite_colour']")
    row.wait_for()
    assert "teal" in row.inner_text() and "80" in row.inner_text()
    row.locator("button.danger").click()
    page.click("#confirm-ok")
    row.wait_for(state="detached")


def test_instructions_panel_lists_a_remembered_instruction_with_its_provenance_and_deletes_it(tab: Page) -> None:
    _needs(tab, "/instructions")
    ns = "rules"  # a namespace of its own: the other tests' lists stay as seeded
    chat = [
        {
            "id": "r1",
            "speaker": "Ann",
            "content": "From now on answer in French.",
            "created_at": "2024-03-01T10:00:00Z",
        },
        {
            "id": "r2",
            "speaker": "Ann",
            "content": "Thanks! From now on answer in English, please.",
            "created_at": "2024-03-02T11:30:00Z",
        },
    ]
    r = httpx.post(
        tab.url + "/remember",
        headers=AUTH,
        timeout=60,
        json={"namespace": ns, "conversation_id": "lang-chat", "messages": chat, "wait": True},
    )
    assert r.status_code == 200, r.text
    page = tab.open()
    page.fill("#token", TOKEN)
    page.fill("#namespace", ns)
    page.click("#login-submit")
    page.wait_for_selector("#sources tbody tr[data-source-id='lang-chat']")
    page.click("a[data-nav='instructions']")
    rows = page.locator("#instructions tbody tr[data-instruction-id]")
    rows.first.wait_for()
    assert rows.count() == 1  # the French one was replaced by the later English one
    row = rows.first.inner_text()
    for shown in (
        "instruction",
        "From now on answer in English, please.",
        "Ann",
        "2024-03-02 11:30",
        "lang-chat",
        "message r2",
    ):
        assert shown in row, (shown, row)
    page.check("#instructions-superseded")
    page.wait_for_function("document.querySelectorAll('#instructions tr.superseded').length === 1")
    assert "From now on answer in French." in page.locator("#instructions tr.superseded").inner_text()
    english = page.locator("#instructions tr[data-instruction-id]:not(.superseded)")
    english.locator("button.danger").click()
    assert "stays in memory" in page.locator("#confirm-body").inner_text()
    page.click("#confirm-ok")
    page.wait_for_function("document.querySelector('#notice').textContent.includes('1 older one(s) in force again')")
    page.uncheck("#instructions-superseded")
    page.wait_for_function("document.querySelectorAll('#instructions tr.superseded').length === 0")
    rows = page.locator("#instructions tbody tr[data-instruction-id]")
    assert rows.count() == 1 and "From now on answer in French." in rows.first.inner_text()
    listed = httpx.get(tab.url + "/instructions", headers=AUTH, params={"namespace": ns}).json()["instructions"]
    assert [i["message_id"] for i in listed] == ["r1"]


def test_context_panel_shows_the_block_and_its_sections(tab: Page) -> None:
    _needs(tab, "/context")
    page = tab.login()
    page.wait_for_selector("#sources tbody tr[data-source-id]")
    page.click("a[data-nav='context']")
    page.fill("#ctx-query", "the sourdough starter")
    page.fill("#ctx-conversation", LONG)
    page.fill("#ctx-budget", "600")
    page.click("#context-form button[type='submit']")
    page.locator("#context-out .context-block").wait_for()
    assert "tokens used of 600" in page.locator("#context-out .meta").inner_text()
    assert page.locator("#context-out .context-section").count() >= 1
    assert page.locator("#context-out .context-block").inner_text().strip()


def test_pin_and_unpin_a_summary(tab: Page) -> None:
    _needs(tab, "/pin")
    page = open_long_conversation(tab)
    l3 = page.locator("#tree > .node").first
    l3.locator(":scope > .node-actions > button.pin").click()
    page.locator("#notice").wait_for(state="visible")
    assert "Pinned" in page.locator("#notice").inner_text()
    l3 = page.locator("#tree > .node").first
    l3.locator(":scope > .node-actions > button.pin", has_text="Unpin").click()
    page.wait_for_function("document.querySelector('#notice').textContent.startsWith('Unpinned')")


def test_a_server_without_auth_needs_no_token(browser, tmp_path: Path, embedder) -> None:
    db = tmp_path / "open.db"
    memory = open_memory(make_settings(tmp_path, local_db_path=db), embedder, ExtractiveSummariser())
    memory.writer.remember(
        "default", RememberRequest(conversation_id="open-chat", messages=conversation(("Ann", "Bob"), 3))
    )
    memory.close()
    server = ServerProcess(db, tmp_path / "server.log", env={"AUTH": "none"}).start()
    try:
        tab = Page(browser, server)
        page = tab.login("")
        page.wait_for_selector("tr[data-source-id='open-chat']")
        assert page.locator("#error").is_hidden() and tab.errors == [] and tab.outside == []
        tab.context.close()
    finally:
        server.stop()


def test_a_conversations_outline_shows_its_lines_under_dates_and_focuses_on_a_query(tab: Page) -> None:
    """Issue 25, item 1: the outline view (GET /conversations/{id}/outline) from the conversation's page."""
    page = open_long_conversation(tab)
    page.click("#outline-link")
    page.wait_for_selector(".outline-lines li")
    assert page.locator(".outline-date").all_inner_texts() == ["2024-01-01"]
    first = page.locator(".outline-lines li").first
    assert first.get_attribute("data-message-id") == "m-0" and first.inner_text().startswith("Ann: About garden")
    meta = page.locator("#outline-meta").inner_text()
    shown, total = map(int, re.findall(r"(\d+) of (\d+) lines", meta)[0])
    assert 0 < shown < total and "left out" in meta  # ~180 lines (a test may delete one) overrun 2000 tokens
    page.fill("#outline-query", "the cello string snapped")
    page.fill("#outline-budget", "80")
    page.click("#outline-submit")
    page.wait_for_function("() => location.hash.includes('query=')")
    page.wait_for_selector(".outline-lines li .score")
    texts = page.locator(".outline-lines li").all_inner_texts()
    assert 0 < len(texts) < 10 and any("cello string snapped" in t for t in texts)
    ids = page.locator(".outline-lines li").evaluate_all("rows => rows.map(r => Number(r.dataset.messageId.slice(2)))")
    assert ids == sorted(ids)  # still oldest first
