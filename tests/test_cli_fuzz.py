"""Every CLI command, given random option values: one line on stderr at most, exit 0, 1 or 2, never a traceback."""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
from collections.abc import Iterator

import click
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockgate.cli import cli, run

# Long-running commands (they serve until stopped) are given a module that does not exist,
# so their options are parsed and checked but nothing is served.
_NO_APP = "lockgate_no_such_module:app"
_SKIP = {("demo",), ("inspect",)}


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    ctx = click.Context(group)  # listed as the CLI lists them: serve, inspect and demo load when asked for
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        elif (*path, name) not in _SKIP:
            yield (*path, name), command


COMMANDS = list(_commands(cli))
_NUMBERS = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["0", "-1", "1e309", "-1e309", "nan", "inf", "9" * 40, "1e20d", "9999999999w", "1h30m", "500ms"]),
)
_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30)
_SHAPES = st.sampled_from(["{}", "[]", '"x"', "null", '{"n": NaN}', "@/nonexistent", "2026-01-01", "never"])
_VALUES = st.one_of(_NUMBERS, _TEXT, _SHAPES)


@pytest.fixture(scope="module")
def stores() -> Iterator[list[str]]:
    with tempfile.TemporaryDirectory() as tmp:
        existing = f"sqlite:///{tmp}/lockgate.db"
        assert run(["migrate", "--store", existing]) == 0
        yield [existing, f"sqlite:///{tmp}/missing/nothing.db", f"sqlite:///{tmp}/lockgate.db/under-a-file.db"]


@st.composite
def _invocation(draw: st.DrawFn, stores: list[str]) -> list[str]:
    path, command = draw(st.sampled_from(COMMANDS))
    options: list[str] = []
    arguments: list[str] = []
    for param in command.params:
        if isinstance(param, click.Argument):
            arguments.append(_NO_APP if path == ("serve",) else draw(_VALUES))
            continue
        assert isinstance(param, click.Option)
        flag = param.opts[-1] if param.opts[-1].startswith("--") else param.opts[0]
        if param.name == "store":  # mostly a real database, so that commands get past opening it
            options += [flag, draw(st.sampled_from([stores[0], stores[0], *stores, "nonsense://x"]))]
        elif param.name == "app_ref":
            options += [flag, _NO_APP] if draw(st.booleans()) else []
        elif param.name == "http_bind":
            options.append("--no-http")
        elif param.is_flag:
            options += [flag] if draw(st.booleans()) else []
        elif draw(st.booleans()):
            choices = list(getattr(param.type, "choices", []))
            value = draw(st.sampled_from(choices) | _VALUES) if choices else draw(_VALUES)
            options += [flag, str(value)]
    return [*path, *options, "--", *arguments]  # "--": an argument such as "-1" is not taken for an option


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_command_fails_in_one_line_with_exit_1_or_2(stores: list[str], data: st.DataObject) -> None:
    argv = data.draw(_invocation(stores), label="argv")
    err = io.StringIO()
    stdin, sys.stdin = sys.stdin, io.StringIO("")  # a verb reading stdin ("-") must not read the worker's
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = run(argv)
    finally:
        sys.stdin = stdin
    assert code in (0, 1, 2), (argv, code, err.getvalue())
    assert "Traceback" not in err.getvalue()
    if code:
        assert err.getvalue().startswith("error: ") and err.getvalue().count("\n") == 1, (argv, err.getvalue())


def test_the_fuzzed_commands_cover_every_command() -> None:
    fuzzed = {" ".join(path) for path, _ in COMMANDS}
    assert {"migrate", "serve", "workflows pending", "workflows list", "cluster status"} <= fuzzed
    assert len(fuzzed) >= 40
