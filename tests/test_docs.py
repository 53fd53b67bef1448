"""The documentation runs: every fenced Python block compiles and is run by a file under examples/, and every
such file runs to completion."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
_FENCE = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _blocks() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in _FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 2
            found.append((f"{page.relative_to(ROOT)}:{line}", match.group(1)))
    return found


@pytest.mark.parametrize(("where", "source"), _blocks(), ids=[where for where, _ in _blocks()])
def test_every_python_block_compiles(where: str, source: str) -> None:
    # top-level await is allowed: a block may show a line of an async body on its own
    compile(source, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_example_runs_to_completion(example: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "examples")}
    done = subprocess.run(
        [sys.executable, str(example)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


def test_the_quickstart_can_be_run_twice(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "examples")}
    outputs = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "run_shop.py")],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0 and not done.stderr.strip(), done.stderr
        outputs.append(done.stdout.split())
    (first, run_id, result), (again, same_id, same_result) = outputs
    assert (first, again) == ("started", "existing")
    assert (same_id, same_result) == (run_id, result) == (run_id, "ch_o-1")


def _named_blocks() -> list[tuple[str, str, Path]]:
    """The blocks that open with ``# NAME.py`` where ``examples/NAME.py`` exists."""
    named = []
    for where, source in _blocks():
        first = source.splitlines()[0] if source.strip() else ""
        match = re.fullmatch(r"#\s*(\w+\.py)\b.*", first)
        if match and (ROOT / "examples" / match.group(1)).exists():
            named.append((where, source, ROOT / "examples" / match.group(1)))
    return named


def test_named_blocks_are_the_example_files() -> None:
    named = _named_blocks()
    assert {p.name for _, _, p in named} >= {"narration.py", "shop.py", "run_shop.py", "test_reminder.py"}
    for where, source, path in named:
        # the same program; comments and layout may differ
        assert ast.dump(ast.parse(source)) == ast.dump(ast.parse(path.read_text())), f"{where} differs from {path}"


# Every Python block of every page is run: a named example (``# NAME.py``), or a fragment whose every
# line (inline comments aside) is a line of some file under examples/, which the test above runs.
_COMMENT = re.compile(r"\s{2,}#.*$")


def _code_lines(source: str) -> list[str]:
    lines = (_COMMENT.sub("", line).strip() for line in source.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def test_every_block_of_every_page_is_run_by_an_example() -> None:
    ran = {line for example in EXAMPLES for line in _code_lines(example.read_text())}
    named = {where for where, _, _ in _named_blocks()}
    missing = []
    for where, source in _blocks():
        if where in named:
            continue
        missing += [f"{where}: {line}" for line in _code_lines(source) if line not in ran]
    assert not missing, "lines shown in the docs that no example runs:\n" + "\n".join(missing)
