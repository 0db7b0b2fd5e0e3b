"""What the `pyramind` command modules share: the two consoles, the option types and how a command gets its
settings and its opened store. local_server/cli.py and local_server/lifetime_cli.py import it; it imports neither,
so the CLI's imports run one way (cli -> lifetime_cli -> cli_common)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from datastore.memory import Memory
from models.settings import Settings

console = Console()
status = Console(stderr=True, soft_wrap=True)  # the store's location and errors; stdout stays the output (--json)

# typer reads a parameter's annotation from its command module's globals: a module using these imports them by name
Namespace = Annotated[str, typer.Option("--namespace", "-n", help="Namespace to work in.")]
OneNamespace = Annotated[str | None, typer.Option("--namespace", "-n", help="One namespace (default: all).")]
Db = Annotated[
    Path | None,
    typer.Option("--db", help="SQLite file of the local store (sets DATASTORE=local and LOCAL_DB_PATH)."),
]


def settings_for(db: Path | None) -> Settings:
    """Settings from the environment (a bad value: one line and exit 2), with `--db` (when given) choosing the
    local store at that file."""
    from server.main import settings_or_exit

    settings = settings_or_exit()
    if db is not None:
        settings = settings.model_copy(update={"datastore": "local", "local_db_path": db})
    return settings


def open_store(settings: Settings, create: bool = False) -> Memory:
    """The opened store, after printing where it is (stderr). A read command (`create` False) refuses a local
    file that does not exist rather than creating an empty one; a store that cannot be opened is one line on
    stderr and exit status 1."""
    from datastore.factory import open_memory, store_location

    where = store_location(settings)
    if settings.resolved_datastore == "local" and not create and not settings.local_db_path.exists():
        status.print(
            f"[red]no store at {settings.local_db_path.expanduser().resolve()}[/red]: give --db PATH or "
            "set LOCAL_DB_PATH (pyramind import creates one)",
            highlight=False,
        )
        raise typer.Exit(1)
    status.print(f"store: {where}", highlight=False)
    try:
        return open_memory(settings)
    except Exception as exc:  # any provider, any cause: one line, not a traceback
        from server.main import open_error

        status.print(f"[red]cannot open the store ({where}):[/red] {open_error(exc)}", highlight=False)
        raise typer.Exit(1) from None
