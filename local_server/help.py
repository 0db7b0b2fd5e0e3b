"""How `pyramind --help` reads: the command and group classes of the `pyramind` CLI (local_server/cli.py).

Recent typer (0.29 here) prints a `<bool>` type beside every on/off flag (`--json <bool>`, `--help <bool>`), a
required argument in braces on the usage line (`pyramind outline [OPTIONS] {conversation_id}`), and keeps a
docstring's line breaks, so a summary in the command list, or a paragraph of a command's help, is cut
mid-sentence. These classes show a flag without a type, an argument as click does (`CONVERSATION_ID`, `[PATH]`
when optional), and each paragraph of a docstring as one line that the terminal wraps; everything else is
typer's. `HelpTyper` gives these classes to every command of the app, so a command added later reads the same.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption
from typer.models import CommandFunctionType

# Contexts, parameters and commands are typed Any here: recent typer builds on a copy of click of its own
# (typer._click, private), older typer on click itself; these classes work with either.


def tidy(params: list[Any]) -> list[Any]:
    """`params` with no type shown for on/off flags (an empty metavar) and arguments named in capitals."""
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
        elif isinstance(param, TyperArgument) and param.metavar is None and param.name:
            param.metavar = param.name.upper()
    return params


def usage_name(param: TyperArgument) -> str:
    """An argument on the usage line: `NAME`, `[NAME]` when optional, `...` after it when it takes several."""
    name = param.metavar or (param.name or "").upper()
    if not param.required:
        name = f"[{name}]"
    return name + ("..." if param.nargs != 1 else "")


def paragraphs(text: str | None) -> str | None:
    """A docstring with each paragraph on one line (paragraphs stay apart by a blank line)."""
    if not text:
        return text
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(text).split("\n\n"))


class HelpCommand(TyperCommand):
    """A `pyramind` command whose help reads as the module docstring says."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = paragraphs(self.help)

    def get_params(self, ctx: Any) -> list[Any]:
        return tidy(super().get_params(ctx))

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            pieces += [usage_name(param)] if isinstance(param, TyperArgument) else param.get_usage_pieces(ctx)
        return pieces


class HelpGroup(TyperGroup):
    """The `pyramind` group: its options tidied like a command's."""

    def get_params(self, ctx: Any) -> list[Any]:
        return tidy(super().get_params(ctx))


class HelpTyper(typer.Typer):
    """A typer app whose group is a HelpGroup and whose commands are HelpCommands unless they name a class."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cls", HelpGroup)
        super().__init__(**kwargs)

    def command(self, *args: Any, **kwargs: Any) -> Callable[[CommandFunctionType], CommandFunctionType]:
        """typer's `command`, with `cls` HelpCommand by default."""
        if kwargs.get("cls") is None:
            kwargs["cls"] = HelpCommand
        return super().command(*args, **kwargs)
