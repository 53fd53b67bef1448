"""The command groups. Command modules register on these; ``cli/__init__.py`` imports them all."""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

import click

from .. import __version__

__all__ = ["EXIT_CODES", "Command", "Group", "cli", "workflows"]

EXIT_CODES = """\b
Exit codes:
  0    success
  1    lockgate refused or failed the request (unknown run or workflow,
       run not eligible for the verb, payload rejected, run failed, timeout)
  2    bad usage (unknown option, bad JSON, bad duration, unknown status)
  130  interrupted"""


class Command(click.Command):
    """A command whose help ends with the exit codes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("epilog", EXIT_CODES)
        super().__init__(*args, **kwargs)


class Group(click.Group):
    """A group whose commands and subgroups are ``Command`` / ``Group``."""

    command_class = Command
    group_class: type[click.Group] | type[type] | None = type  # subgroups are of this class too

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("epilog", EXIT_CODES)
        super().__init__(*args, **kwargs)


class RootGroup(Group):
    """The ``lockgate`` group, which imports the modules of its heaviest commands only when one is run.

    ``serve``, ``inspect`` and ``demo`` bring in the HTTP server and the dashboard (FastAPI, Jinja2,
    uvicorn): a verb such as ``workflows show`` should not pay their import on every call.
    """

    group_class = Group  # its subgroups list only their own commands
    # command name -> module of this package that registers it when imported
    lazy: ClassVar[dict[str, str]] = {"demo": "demo", "inspect": "inspect_api", "serve": "serve"}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            importlib.import_module(f"{__package__}.{self.lazy[cmd_name]}")
        return super().get_command(ctx, cmd_name)


@click.group(
    name="lockgate",
    cls=RootGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, "--version", prog_name="lockgate")
def cli() -> None:
    """Durable workflows whose flow control is decided at the gate.

    Run workers with `lockgate serve`, try it with `lockgate demo`, and inspect or
    recover runs with `lockgate workflows`.
    """


@cli.group()
def workflows() -> None:
    """List, inspect, start and recover runs (executes nothing; `lockgate serve` runs them)."""
