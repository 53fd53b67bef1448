"""``lockgate migrate``: create a lockgate database, or bring its schema up to this version.

Every other command except ``serve`` (which migrates at boot unless ``--no-migrate``) and
``demo`` opens only a database that is already lockgate's and current: it creates no database and
changes no schema. Any command refuses a database holding migrations this lockgate does not know.
"""

from __future__ import annotations

import click

from ..store import open_store
from ..store.sql_files import schema_version
from .common import run_async, store_option
from .groups import cli
from .output import display_url

__all__ = ["migrate"]


@cli.command()
@store_option
def migrate(store: str) -> None:
    """Create the lockgate tables at --store, or apply the migrations it lacks.

    Needs the right to create tables (docs/postgres.md lists the privileges). A SQLite file
    that holds another application's tables is refused, and nothing is written to it.
    """

    async def go() -> bool:
        opened = open_store(store)
        opened.schema_mode = "migrate"
        opened.share_file = False
        await opened.open()
        await opened.close()
        return opened.created

    created = run_async(go())
    dialect = "sqlite" if store.startswith("sqlite:") else "postgres"
    said = "created a lockgate database" if created else "lockgate schema"
    click.echo(f"{said} at version {schema_version(dialect)}: {display_url(store)}")
