"""`pyramind forget` and `pyramind export`: thin callers of the store's forgetting policy and export
(datastore/lifetime/policy.py, datastore/portability/dump.py). Registered on the `pyramind` app by
local_server/cli.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from local_server.cli_common import Db, OneNamespace, console, open_store, settings_for, status


def looks_like_dump(path: Path) -> bool:
    """Whether the file is a `pyramind export` dump (its first line is the dump header)."""
    from datastore.portability.dump import is_dump

    with path.open(encoding="utf-8", errors="replace") as f:
        return is_dump(f.readline())


def import_dump_file(path: Path, namespace: str | None, db: Path | None = None) -> None:
    """Restore a dump into the configured store (created when missing); exits 2 naming the bad line (nothing
    written, and a local store file this import created is removed again)."""
    from services.errors import PyramindError

    settings = settings_for(db)
    local = settings.resolved_datastore == "local"
    created = local and not settings.local_db_path.exists()
    store = open_store(settings, create=True)
    try:
        from datastore.portability.dump import import_dump

        with path.open(encoding="utf-8") as f:
            report = import_dump(store, f, namespace)
    except PyramindError as exc:
        store.close()
        if created:  # the file and its journal: an empty store the refused import left would look restored
            for suffix in ("", "-wal", "-shm"):
                Path(f"{settings.local_db_path}{suffix}").unlink(missing_ok=True)
        console.print(f"[red]cannot import {path}: {exc.message}[/red]")
        raise typer.Exit(2) from exc
    store.close()
    console.print(
        f"restored {report['sources']} sources, {report['messages']} messages, {report['nodes']} nodes, "
        f"{report['marks']} marks, {report['core_memory']} core memory entries, "
        f"{report['instructions']} instructions and {report['idempotency']} idempotency keys"
    )


def register(app: typer.Typer) -> None:
    """Add the lifetime commands to the `pyramind` CLI."""

    @app.command()
    def forget(
        dry_run: Annotated[bool, typer.Option("--dry-run", help="Only show what would be forgotten.")] = False,
        namespace: OneNamespace = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the reports as JSON.")] = False,
        db: Db = None,
    ) -> None:
        """Apply the forgetting policy (FORGET_MAX_NODES, FORGET_AFTER_DAYS, FORGET_FRACTION) now.

        With the policy off, a dry run reports that nothing would be forgotten (exit 0); forgetting for real is
        refused (exit 1). Either way stderr says how to turn it on.
        """
        store = open_store(settings_for(db))
        try:
            if not store.policy.enabled:
                status.print(
                    "[yellow]the forgetting policy is off: nothing is forgotten until FORGET_MAX_NODES or "
                    "FORGET_AFTER_DAYS is set[/yellow]"
                )
                if not dry_run:
                    raise typer.Exit(1)
            reports = [store.policy.run(namespace, dry_run)] if namespace else store.policy.run_all(dry_run)
        finally:
            store.close()
        if as_json:
            console.print_json(json.dumps([r.model_dump(mode="json") for r in reports]))
            return
        for r in reports:
            verb = "would forget" if dry_run else "forgot"
            table = Table(
                "chunk",
                "source",
                "reason",
                "visits",
                "last visited",
                "ends",
                "messages",
                title=f"{r.namespace}: {r.l1_before} chunks; {verb} {len(r.forgotten)}"
                + ("" if dry_run else f", {r.l1_after} left")
                + ("" if r.enabled else " (the forgetting policy is off)"),
            )
            for f in r.forgotten:
                table.add_row(
                    f.node_id,
                    f.source_id,
                    f.reason,
                    str(f.visit_count),
                    str(f.last_visited_at or "never"),
                    str(f.end_time or ""),
                    str(len(f.message_ids)),
                )
            console.print(table)

    @app.command()
    def export(
        namespace: OneNamespace = None,
        embeddings: Annotated[
            bool, typer.Option(help="Include every node's embedding (larger; no re-embedding).")
        ] = False,
        out: Annotated[Path | None, typer.Option("--out", "-o", help="Write here instead of stdout.")] = None,
        db: Db = None,
    ) -> None:
        """Write every conversation, document, message, node, visit, pin and core memory entry as a JSONL dump
        (`pyramind import` restores it into any provider)."""
        from datastore.portability.dump import export_lines

        store = open_store(settings_for(db))
        try:
            target = out.open("w", encoding="utf-8") if out else sys.stdout
            try:
                for line in export_lines(store, [namespace] if namespace else None, embeddings):
                    target.write(line + "\n")
            finally:
                if out:
                    target.close()
        finally:
            store.close()
