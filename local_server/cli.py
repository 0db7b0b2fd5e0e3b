"""The `pyramind` command: serve, mcp, import, query, show, stats, outline, conversations, openapi. Thin callers of
the app and the store."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.tree import Tree

from local_server.cli_common import Db, Namespace, console, open_store, settings_for, status
from local_server.help import HelpTyper
from local_server.lifetime_cli import import_dump_file, looks_like_dump
from local_server.lifetime_cli import register as register_lifetime
from models.api import DEFAULT_NAMESPACE, Query, QueryFilter, RememberRequest
from models.memory import MemoryNode
from models.settings import Settings

app = HelpTyper(help="Pyramind: hierarchical long-term memory for LLM chat apps.", no_args_is_help=True)


def serve_settings(settings: Settings, local: bool, host: str | None, port: int | None) -> Settings:
    """What `pyramind serve` runs with: the settings with `--host`/`--port` applied, and in local mode the local
    settings on that port (whose OpenAPI `servers` entry and ai-plugin.json name it)."""
    from local_server.main import local_settings

    if local:
        return local_settings(settings, host, port)
    updates = {k: v for k, v in {"host": host, "port": port}.items() if v is not None}
    return settings.model_copy(update=updates)


@app.command()
def serve(
    local: Annotated[bool, typer.Option(help="Local mode: no auth, CORS for ChatGPT, port 3333 (or --port).")] = False,
    host: Annotated[str | None, typer.Option(help="Bind address (HOST).")] = None,
    port: Annotated[int | None, typer.Option(min=1, max=65535, help="Port (PORT; 3333 with --local).")] = None,
    db: Db = None,
) -> None:
    """Run the HTTP server (settings from the environment and .env)."""
    from server.main import serve as run

    settings = serve_settings(settings_for(db), local, host, port)
    try:
        from server.auth import check_auth_settings

        check_auth_settings(settings)  # fail fast, before loading any model
    except ValueError as exc:  # one line on stderr, like a bad setting
        status.print(f"pyramind: {exc}", highlight=False, markup=False)
        raise typer.Exit(2) from None
    # the server's own log says "Running on http://HOST:PORT" once it listens
    console.print(f"Memory browser: http://{settings.host}:{settings.port}/ui/  (API docs: /docs)")
    run(settings)  # prints the store's location, or one line and exit 1 when it cannot be opened


@app.command("import")
def import_(
    path: Annotated[
        Path,
        typer.Argument(exists=True, dir_okay=False, help="LoCoMo JSON, ChatGPT conversations.json, JSONL or a dump."),
    ],
    fmt: Annotated[str, typer.Option("--format", help="auto, locomo, chatgpt, jsonl or dump.")] = "auto",
    namespace: Namespace = DEFAULT_NAMESPACE,
    db: Db = None,
    user: Annotated[
        str | None,
        typer.Option(
            "--user",
            help="The speaker whose memory these chats are (e.g. Jon in LoCoMo's chat of Jon and Gina): in a chat "
            "between people only their preferences are kept, none without it.",
        ),
    ] = None,
) -> None:
    """Remember every conversation in a chat-history file, with a progress bar; or restore a `pyramind export`
    dump exactly (detected from its first line). --user names every conversation's `user` (POST /remember)."""
    from services.importers import read

    if fmt not in ("auto", "locomo", "chatgpt", "jsonl", "dump"):
        raise typer.BadParameter("--format must be auto, locomo, chatgpt, jsonl or dump")
    if fmt == "dump" or (fmt == "auto" and looks_like_dump(path)):
        import_dump_file(path, namespace if namespace != DEFAULT_NAMESPACE else None, db)
        return
    try:
        batches = list(read(path, fmt))  # type: ignore[arg-type]
    except (ValueError, KeyError, json.JSONDecodeError) as exc:
        console.print(f"[red]cannot read {path}: {exc}[/red]")
        raise typer.Exit(2) from exc
    total = sum(len(b.messages) for b in batches)
    store = open_store(settings_for(db), create=True)
    convs: set[str] = set()
    chunks = summaries = 0
    try:
        with Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
        ) as bar:
            task = bar.add_task("remembering", total=total)
            for b in batches:
                if b.fork is not None and store.storage.get_source(namespace, b.conversation_id) is None:
                    store.forks.fork(namespace, b.fork[0], b.fork[1], b.conversation_id)  # a ChatGPT branch
                r = store.writer.remember(
                    namespace,
                    RememberRequest(conversation_id=b.conversation_id, messages=b.messages, title=b.title, user=user),
                )
                convs.add(r.conversation_id)
                chunks += len(r.chunk_ids)
                summaries += len(r.summary_ids)
                bar.update(task, advance=len(b.messages), description=f"remembering {b.conversation_id}")
        console.print(f"{total} messages in {len(convs)} conversations: {chunks} chunks, {summaries} summaries")
    finally:
        store.close()


@app.command()
def query(
    text: Annotated[str, typer.Argument(help="What to recall.")],
    top_k: Annotated[int, typer.Option("--top-k", "-k", min=1, help="How many results.")] = 5,
    level: Annotated[int | None, typer.Option(min=1, help="Only this level.")] = None,
    conversation_id: Annotated[str | None, typer.Option(help="Only this conversation.")] = None,
    mode: Annotated[
        str | None,
        typer.Option(
            help="Ranking: hybrid (L1 chunks, BM25 + cosine), dense (cosine, every level), text (BM25, every level) "
            "or tree; default RETRIEVAL_MODE."
        ),
    ] = None,
    namespace: Namespace = DEFAULT_NAMESPACE,
    as_json: Annotated[bool, typer.Option("--json", help="Print the API's JSON.")] = False,
    db: Db = None,
) -> None:
    """Search memories and print the best, with their date and conversation; each id is printed whole on its own
    line (never cut to the terminal's width), so it can be pasted into `pyramind show`."""
    from datastore.read.ranking import MODES

    if mode is not None and mode not in MODES:
        raise typer.BadParameter(f"one of {', '.join(MODES)}", param_hint="--mode")
    store = open_store(settings_for(db))
    try:
        flt = QueryFilter(level=level, conversation_id=conversation_id) if (level or conversation_id) else None
        res = store.reader.query(namespace, [Query(query=text, top_k=top_k, filter=flt, mode=mode)])
    finally:
        store.close()
    if as_json:
        console.print_json(res.model_dump_json())
        return
    for warning in res.warnings:
        console.print(f"[yellow]{warning.message}[/yellow]", highlight=False)
    for rank, r in enumerate(res.results[0].results, 1):
        when = f"{r.start_time:%Y-%m-%d}" if r.start_time else ""
        if r.end_time and r.start_time and r.end_time.date() != r.start_time.date():
            when += f" to {r.end_time:%Y-%m-%d}"
        source = f"conversation {r.conversation_id}" if r.conversation_id else f"document {r.document_id}"
        console.print(
            f"[bold]{rank}.[/bold] score {r.score:.3f}  L{r.level}  date {when or '-'}  ", highlight=False, end=""
        )
        console.print(source, highlight=False, markup=False, soft_wrap=True)
        console.print(f"id: {r.id}", soft_wrap=True, highlight=False, markup=False)  # whole, never wrapped
        console.print(r.text, highlight=False, markup=False)
        console.print()


def _label(n: MemoryNode) -> str:
    head = n.text.splitlines()[0] if n.text else ""
    return f"[bold]L{n.level}[/bold] {n.id} [dim]{head[:100]}[/dim]"


@app.command()
def show(
    node_id: Annotated[str, typer.Argument(help="A memory id.")],
    namespace: Namespace = DEFAULT_NAMESPACE,
    db: Db = None,
) -> None:
    """Print a memory and its subtree down to the L1 chunks."""
    from services.errors import NotFoundError

    store = open_store(settings_for(db))
    try:
        nodes = store.reader.subtree(namespace, node_id)
    except NotFoundError as exc:
        console.print(f"[red]{exc.message}[/red]")
        raise typer.Exit(1) from exc
    finally:
        store.close()
    root = nodes[0]
    console.print(
        f"L{root.level} {root.id} {root.source_type} {root.source_id} "
        f"parent={root.parent_id} {root.start_time or ''}..{root.end_time or ''}",
        soft_wrap=True,
        highlight=False,
        markup=False,
    )
    console.print(root.text, highlight=False, markup=False)
    by_id = {n.id: n for n in nodes}
    if not any(cid in by_id for cid in root.children):
        return  # a chunk: the node is printed once, with no tree below it
    tree = Tree(f"[dim]what L{root.level} covers:[/dim]")

    def grow(branch: Tree, node: MemoryNode) -> None:
        for cid in node.children:
            if cid in by_id:
                grow(branch.add(_label(by_id[cid])), by_id[cid])

    grow(tree, root)
    console.print(tree)


@app.command()
def stats(namespace: Namespace = DEFAULT_NAMESPACE, db: Db = None) -> None:
    """Counts of the namespace: sources, messages, nodes per level."""
    store = open_store(settings_for(db))
    try:
        console.print_json(json.dumps(store.storage.counts(namespace)))
    finally:
        store.close()


@app.command()
def outline(
    conversation_id: Annotated[str, typer.Argument(help="The conversation to outline.")],
    query: Annotated[
        str | None, typer.Option("--query", "-q", help="Only the lines closest to this (still oldest first).")
    ] = None,
    budget_tokens: Annotated[
        int, typer.Option("--budget-tokens", "-b", min=20, max=100_000, help="Most tokens of the outline.")
    ] = 2000,
    namespace: Namespace = DEFAULT_NAMESPACE,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the API's JSON (GET /conversations/{id}/outline).")
    ] = False,
    db: Db = None,
) -> None:
    """Print what was said in a conversation, line by line: each message's lead under its date, oldest first."""
    from services.errors import NotFoundError

    store = open_store(settings_for(db))
    try:
        res = store.outline.outline(namespace, conversation_id, query, budget_tokens)
    except NotFoundError as exc:
        status.print(f"[red]{exc.message}[/red]")
        raise typer.Exit(1) from exc
    finally:
        store.close()
    if as_json:
        console.print_json(res.model_dump_json())
        return
    for day in res.days:
        console.print(f"[bold]\\[{day.date}][/bold]")
        for line in day.lines:
            console.print(f"[cyan]{escape(line.speaker)}[/cyan]: {escape(line.text)}", soft_wrap=True)
    if res.omitted:
        status.print(f"{res.omitted} of {res.total_lines} lines left out (--budget-tokens {budget_tokens})")


@app.command()
def conversations(
    namespace: Namespace = DEFAULT_NAMESPACE,
    as_json: Annotated[bool, typer.Option("--json", help="Print the listing's JSON (GET /conversations).")] = False,
    db: Db = None,
) -> None:
    """List the namespace's conversations and documents: id, title, messages, first and last message time."""
    store = open_store(settings_for(db))
    try:
        sources, cursor = [], None
        while True:  # every page of the listing (GET /conversations), in id order
            page = store.listing.sources(namespace, 100, cursor)
            sources += page.conversations
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
    finally:
        store.close()
    if as_json:
        console.print_json(json.dumps([s.model_dump(mode="json", exclude={"metadata"}) for s in sources]))
        return
    table = Table(
        "id", "title", "messages", "from", "to", title=f"{namespace}: {len(sources)} conversations and documents"
    )
    for s in sources:
        kind = "" if s.source_type == "conversation" else f" ({s.source_type})"
        table.add_row(
            s.id + kind,
            s.title or "",
            str(s.message_count),
            f"{s.start_time:%Y-%m-%d %H:%M}" if s.start_time else "",
            f"{s.end_time:%Y-%m-%d %H:%M}" if s.end_time else "",
        )
    console.print(table)


@app.command()
def migrate(
    source: Annotated[str, typer.Option("--from", help="Provider to copy from: local, postgres or pinecone.")],
    target: Annotated[str, typer.Option("--to", help="Provider to copy into: local, postgres or pinecone.")],
    namespace: Annotated[list[str] | None, typer.Option("--namespace", "-n", help="Only these (default: all).")] = None,
) -> None:
    """Copy every node with its embedding and tree links into another provider, then verify the counts.

    Both providers are configured from the environment (LOCAL_DB_PATH, POSTGRES_URL, PINECONE_*). Resumable:
    run it again after an interruption and finished conversations are skipped.
    """
    from datastore.factory import open_memory
    from datastore.portability.migrate import migrate_memory
    from services.errors import PyramindError

    providers = ("local", "postgres", "pinecone")
    if source not in providers or target not in providers or source == target:
        raise typer.BadParameter("--from and --to must be two different providers of: local, postgres, pinecone")
    settings = Settings()
    src = open_memory(settings.model_copy(update={"datastore": source}))
    dst = open_memory(settings.model_copy(update={"datastore": target}), src.embedder, src.summariser)
    try:
        with Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
        ) as bar:
            task = bar.add_task("copying", total=None)

            def step(ns: str, source_id: str, done: int, total: int, action: str) -> None:
                bar.update(task, completed=done, total=total, description=f"{ns}: {action} {source_id}")

            report = migrate_memory(src, dst, namespace or None, step)
    except PyramindError as exc:
        console.print(f"[red]{exc.message}[/red]")
        raise typer.Exit(1) from exc
    finally:
        src.close()
        dst.close()
    console.print(
        f"{report['copied']} sources copied, {report['skipped']} already there; "
        f"{report['messages']} messages, {report['nodes']} nodes, {report['marks']} marks, "
        f"{report['core_memory']} core memory entries, {report['instructions']} instructions and "
        f"{report['idempotency']} idempotency keys verified at the destination"
    )


@app.command()
def upgrade(db: Db = None) -> None:
    """Rebuild a store written before messages kept their sentences: every conversation and document whose
    messages were stored without them gets chunks of whole, dated sentences (nothing else changes). Safe to
    run again: what is current is left as it is.
    """
    from datastore.portability.upgrade import upgrade as upgrade_store
    from services.errors import PyramindError

    memory = open_store(settings_for(db))
    try:

        def step(ns: str, source_id: str, action: str) -> None:
            if action == "rebuilt":
                status.print(f"{ns}: rebuilt {source_id}", highlight=False)

        report = upgrade_store(memory, step)
    except PyramindError as exc:
        console.print(f"[red]{exc.message}[/red]")
        raise typer.Exit(1) from exc
    finally:
        memory.close()
    console.print(
        f"{report.rebuilt} sources rebuilt on sentences ({report.messages} messages split), "
        f"{report.current} already current"
    )


@app.command()
def mcp(
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="Namespace of tool calls that name none (default: default).")
    ] = None,
    db: Db = None,
) -> None:
    """Serve the memory tools over MCP on stdin/stdout, for Claude Desktop, Cursor and other MCP clients.

    Opens the store configured in the environment (.env), creating it on first use; a local process the user
    starts, so no token is asked. Its status lines go to stderr: stdout carries only the protocol.
    """
    from server.mcp_tools import build_mcp

    settings = settings_for(db)
    store = open_store(settings, create=True)
    try:
        build_mcp(lambda: store, settings, namespace).run("stdio")
    finally:
        store.close()


@app.command()
def openapi(
    out: Annotated[Path | None, typer.Option(help="Write here instead of printing.")] = None,
    local: Annotated[bool, typer.Option(help="The local server's document (serve --local: no auth).")] = False,
) -> None:
    """Print (or write) the OpenAPI document as YAML: what `pyramind serve` serves at /.well-known/openapi.yaml
    with these settings (its bearer security scheme included; PUBLIC_URL, when set, is its server), or with
    --local what `serve --local` serves."""
    import asyncio

    from pydantic import SecretStr

    from local_server.main import local_settings
    from server.app import create_app

    settings = settings_for(None)
    if local:
        settings = local_settings(settings)
    elif settings.auth != "none":  # the document shows the bearer scheme whatever the key; printing needs none
        settings = settings.model_copy(update={"auth": "bearer", "bearer_token": SecretStr("document-only")})

    async def fetch() -> str:
        app = create_app(settings, open_store=False)
        async with app.test_app() as test_app:
            resp = await test_app.test_client().get("/.well-known/openapi.yaml")
            return await resp.get_data(as_text=True)

    text = asyncio.run(fetch())
    if out:
        out.write_text(text, encoding="utf-8")
    else:
        typer.echo(text, nl=False)


register_lifetime(app)


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    app()


if __name__ == "__main__":
    main()
