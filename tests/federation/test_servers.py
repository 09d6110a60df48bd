"""The federation kinds are servers (`benchmark/federation/servers/`, one file each): the run
option `federation` names one, and no module outside that folder tells the kinds apart by
their names -- what differs between them is the server's to say."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from benchmark.config import FEDERATIONS
from benchmark.federation.servers import DEFAULT_FEDERATION, federation_label, server_class

ROOT = Path(__file__).resolve().parents[2]
SERVERS = ROOT / "benchmark" / "federation" / "servers"


def test_every_federation_option_is_a_server_of_its_name_in_a_file_of_its_name():
    for name in FEDERATIONS:
        server = server_class(name)
        assert server.name == name
        assert Path(__import__(server.__module__, fromlist=["_"]).__file__) == SERVERS / f"{name}.py"
    with pytest.raises(ValueError, match=r"'fedprox' is not a federation kind; expected fedavg \| local \| central"):
        server_class("fedprox")
    assert [federation_label(name) for name in FEDERATIONS] == ["", "local", "central"]


def _names_federation(node: ast.AST) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return "federation" in name.lower()


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for element in node.elts for s in _strings(element)]
    return []


def federation_string_tests(source: str) -> list[int]:
    """The lines of `source` comparing a federation (a name or attribute called so) with a
    string, or anything with the default kind's name ("local" names other things too: an executor)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            strings = [s for o in operands for s in _strings(o)]
            if (strings and any(_names_federation(o) for o in operands)) or DEFAULT_FEDERATION in strings:
                lines.append(node.lineno)
    return lines


def test_the_check_finds_the_string_tests_it_forbids():
    source = (
        'a = config.federation == "central"\n'
        'b = federation != "fedavg"\n'
        'c = run.federation in ("local", "central")\n'
        'd = v == "fedavg"\n'
        "e = config.federation in FEDERATIONS\n"  # membership in the option's choices: allowed
        'f = executor.name != "local"\n'
    )
    assert federation_string_tests(source) == [1, 2, 3, 4]


def test_no_module_outside_the_servers_tells_federation_kinds_apart_by_name():
    found = []
    for folder in ("benchmark", "data", "methods", "scripts"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if SERVERS in path.parents:
                continue
            found += [f"{path.relative_to(ROOT)}:{line}" for line in federation_string_tests(path.read_text())]
    assert found == [], "a federation kind's rule belongs to its server (benchmark/federation/servers/)"
