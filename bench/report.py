"""Output shared by the bench scripts: one table on the terminal, one JSON document on disk."""

from __future__ import annotations

import json
import os
import platform
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["Cell", "machine", "print_table", "ratio", "write_json"]

Cell = str | int | float | None


def _text(cell: Cell) -> str:
    if cell is None:
        return "-"
    if isinstance(cell, float):
        if cell >= 100:
            return f"{cell:,.0f}"
        if cell >= 10:
            return f"{cell:.1f}"
        return f"{cell:.2f}"
    if isinstance(cell, int):
        return f"{cell:,}"
    return cell


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Cell]], *, plain: bool = False) -> None:
    """Print ``rows`` under ``headers``: a rich table on a terminal, aligned plain text otherwise."""
    cells = [[_text(c) for c in row] for row in rows]
    if not plain:
        try:
            from rich.console import Console
            from rich.table import Table
        except ImportError:
            plain = True
        else:
            table = Table(title=title)
            for i, header in enumerate(headers):
                numeric = any(isinstance(row[i], int | float) for row in rows)
                table.add_column(header, justify="right" if numeric else "left")
            for row in cells:
                table.add_row(*row)
            Console().print(table)
            return
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    print(title)
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))


def ratio(value: float | None, floor: float | None) -> float | None:
    """``value / floor`` when both are known."""
    if value is None or not floor:
        return None
    return value / floor


def machine() -> dict[str, Any]:
    """Where the figures were taken: enough to tell two runs' machines and code apart."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False, timeout=5
        ).stdout.strip()
    except OSError:
        commit = ""
    return {
        "taken_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "commit": commit or None,
    }


def write_json(path: str | Path, document: dict[str, Any]) -> Path:
    """Write ``document`` as indented JSON at ``path`` (folders created); the path written."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")
    return target
