"""The ``lockgate`` command line.

Each command lives in a small module that registers on a group from ``groups.py``;
importing the module below is what adds it (``serve``, ``inspect`` and ``demo`` are imported
when run: see ``groups.RootGroup``). ``main`` turns every expected failure into
one line on stderr and an exit code (0 ok, 1 lockgate error, 2 bad usage, 130 interrupted).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

import click

from ..errors import LockgateError
from . import bulk as bulk
from . import callbacks as callbacks
from . import check as check
from . import cluster as cluster  # each import registers that module's commands on its group
from . import doctor as doctor
from . import events as events
from . import flowkeys as flowkeys
from . import gate as gate
from . import keys as keys
from . import migrate as migrate
from . import schedule_edit as schedule_edit
from . import schedules as schedules
from . import stats as stats
from . import verbs as verbs
from . import workflows as workflows
from .groups import cli

__all__ = ["cli", "main", "run"]


def run(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); the exit code."""
    try:
        result = cli.main(args=list(argv) if argv is not None else None, prog_name="lockgate", standalone_mode=False)
    except click.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        # one line: click lists the choices of a missing option on lines of their own
        _fail(re.sub(r"\s*\n\s*", " ", f"{exc.format_message()}{hint}"))
        return exc.exit_code
    except click.ClickException as exc:
        _fail(exc.format_message())
        return exc.exit_code
    except click.Abort:
        _fail("interrupted")
        return 130
    except LockgateError as exc:
        _fail(str(exc))
        return 1
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:  # the machine refused (a file, a folder, a port): its words, no traceback
        _fail(str(exc))
        return 1
    return result if isinstance(result, int) else 0


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point of the ``lockgate`` script."""
    sys.exit(run(argv))


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
