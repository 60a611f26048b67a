"""Claims of docs/explanation/architecture.md: its module maps of the portal
(``crowdpref/portal/``) and of the command line (``crowdpref/cli/``) name every module there is,
and nothing that is not; the command line's map gives each command module the commands it
registers, in the order ``crowdpref --help`` lists them."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
import typer.main

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "explanation" / "architecture.md"


def _section(heading: str) -> str:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start: end if end != -1 else len(text)]


def _table(section: str) -> dict[str, str]:
    """The first column (a module's file name) -> the second, of the section's table."""
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| `([\w.]+\.py)` \| (.*) \|$", section, re.M)}


@pytest.mark.parametrize(("heading", "folder"), [("## The portal", "crowdpref/portal"),
                                                 ("## The command line", "crowdpref/cli")])
def test_the_module_maps_name_every_module(heading, folder):
    named = set(_table(_section(heading)))
    present = {p.name for p in (ROOT / folder).glob("*.py") if p.name != "__init__.py"}
    assert named == present, (f"on the page, not in {folder}: {sorted(named - present)}; "
                              f"in {folder}, not on the page: {sorted(present - named)}")


def test_the_cli_map_gives_each_module_its_commands_in_the_help_order():
    from crowdpref.cli import app

    group = typer.main.get_command(app)
    ctx = click.Context(group, info_name="crowdpref")
    registered: dict[str, list[str]] = {}  # module file -> its commands, in --help order
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        subcommands = getattr(command, "commands", None)
        leaves = [(f"{name} {sub}", c) for sub, c in subcommands.items()] if subcommands else [(name, command)]
        for full, leaf in leaves:
            registered.setdefault(leaf.callback.__module__.rsplit(".", 1)[1] + ".py", []).append(full)
    page = {module: re.findall(r"`([^`]+)`", cell) for module, cell in _table(_section("## The command line")).items()
            if cell.startswith("`")}  # a list of commands; "(none) ..." for a module without any
    assert page == registered
