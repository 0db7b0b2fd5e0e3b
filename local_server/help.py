"""How `pyramind --help` reads: the command and group classes of the `pyramind` CLI (local_server/cli.py).

Recent typer (0.29 here) prints a `<bool>` type beside every on/off flag (`--json <bool>`, `--help <bool>`), a
required argument in braces on the usage line (`pyramind outline [OPTIONS] {conversation_id}`), and keeps a
docstring's line breaks in its command list, so a summary is cut mid-sentence. These classes show a flag
without a type, an argument as click does (`CONVERSATION_ID`, `[PATH]` when optional), and each command's first
paragraph on one line; everything else is typer's.
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

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


class HelpCommand(TyperCommand):
    """A `pyramind` command whose help reads as the module docstring says."""

    def get_params(self, ctx: Any) -> list[Any]:
        return tidy(super().get_params(ctx))

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            pieces += [usage_name(param)] if isinstance(param, TyperArgument) else param.get_usage_pieces(ctx)
        return pieces


class HelpGroup(TyperGroup):
    """The `pyramind` group: its options tidied like a command's, each command listed by its first paragraph
    on one line (`short_help`, unless the command sets one)."""

    def get_params(self, ctx: Any) -> list[Any]:
        return tidy(super().get_params(ctx))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None and command.short_help is None and command.help:
            command.short_help = " ".join(command.help.split("\n\n")[0].split())
        return command
