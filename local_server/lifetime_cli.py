"""`pyramind forget` and `pyramind export`: thin callers of the store's forgetting policy and export
(datastore/forgetting.py, datastore/export.py). Registered on the `pyramind` app by local_server/cli.py."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from models.settings import Settings


def register(app: typer.Typer) -> None:
    """Add the lifetime commands to the `pyramind` CLI."""
    from local_server.cli import _store, console

    @app.command()
    def forget(
        dry_run: Annotated[bool, typer.Option("--dry-run", help="Only show what would be forgotten.")] = False,
        namespace: Annotated[str | None, typer.Option("--namespace", "-n", help="One namespace (default: all).")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the reports as JSON.")] = False,
    ) -> None:
        """Apply the forgetting policy (FORGET_MAX_NODES, FORGET_AFTER_DAYS, FORGET_FRACTION) now."""
        store = _store(Settings())
        try:
            if not store.policy_enabled:
                console.print("[yellow]the forgetting policy is off: set FORGET_MAX_NODES or FORGET_AFTER_DAYS[/yellow]")
                raise typer.Exit(1)
            reports = ([store.forget_policy_sync(namespace, dry_run)] if namespace
                       else store.forget_policy_all_sync(dry_run))
        finally:
            store.close()
        if as_json:
            console.print_json(json.dumps([r.model_dump(mode="json") for r in reports]))
            return
        for r in reports:
            verb = "would forget" if dry_run else "forgot"
            table = Table("chunk", "source", "reason", "visits", "last visited", "ends", "messages",
                          title=f"{r.namespace}: {r.l1_before} chunks; {verb} {len(r.forgotten)}"
                          + ("" if dry_run else f", {r.l1_after} left"))
            for f in r.forgotten:
                table.add_row(f.node_id, f.source_id, f.reason, str(f.visit_count), str(f.last_visited_at or "never"),
                              str(f.end_time or ""), str(len(f.message_ids)))
            console.print(table)
