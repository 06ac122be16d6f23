"""`adaserve --help` and every sub-command's help: each option says what it does, and
bench's, loadgen's and simulate's show their defaults and end their description with an
example."""

from __future__ import annotations

import argparse

import pytest

from adaserve.cli import build_parser



def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


@pytest.mark.parametrize("name", list(_commands()))
def test_every_option_of_every_command_has_help(name):
    parser = _commands()[name]
    missing = {a.option_strings[0] if a.option_strings else a.dest
               for a in parser._actions if not (a.help or "").strip()}
    assert not missing, f"adaserve {name}: no help for {missing}"


def test_top_level_help_is_for_users():
    text = build_parser().format_help()
    assert "registered by the components" not in text
    for command in ("adaserve serve", "adaserve loadgen", "adaserve bench", "adaserve simulate",
                    "docs/"):
        assert command in text


@pytest.mark.parametrize("name,requests", [("bench", 40), ("loadgen", 50)])
def test_bench_and_loadgen_show_defaults_and_an_example(name, requests):
    parser = _commands()[name]
    text = parser.format_help()
    assert f"example:\n  adaserve {name} " in text
    formatter = parser._get_formatter()
    for a in parser._actions:
        if a.nargs != 0 and a.default not in (None, ""):
            assert "%(default)s" in formatter._get_help_string(a), a.option_strings
    flat = " ".join(text.split())
    assert f"--requests REQUESTS requests per load point (default: {requests})" in flat \
        or f"--requests REQUESTS requests in the run (default: {requests})" in flat
    assert "--mix-iid" in text and "--mix-exact" in text


def test_simulate_help_shows_defaults_and_examples(capsys):
    parser = _commands()["simulate"]
    formatter = parser._get_formatter()
    for a in parser._actions:
        if a.nargs != 0 and a.default not in (None, ""):
            assert "%(default)s" in formatter._get_help_string(a), a.option_strings
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["simulate", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert "examples:\n  adaserve simulate --setup paper-llama3.1-70b --trace " in text
    flat = " ".join(text.split())
    assert "else llama3.1-70b-a100-tp4)" in flat and "--mix-exact" in text
