"""The one registry mechanism (benchmark/plugins.py): methods, protocols and datasets each
hold a `Registry`, and a registry finds its members the same way for all three: the
built-ins of a package (each module, one at a time), the specs of an environment variable,
the entry points of a group; a broken plugin is recorded with why and undone."""

from __future__ import annotations

import sys
import types

import pytest

from benchmark import plugins
from benchmark.errors import ConfigError, SetupWarning
from benchmark.method_registration import METHODS
from benchmark.plugins import Registry
from benchmark.protocol import PROTOCOLS
from data.registry import DATASETS


def test_methods_protocols_and_datasets_share_the_mechanism():
    registries = {METHODS: "fedbench.methods", PROTOCOLS: "fedbench.protocols", DATASETS: "fedbench.datasets"}
    for registry, group in registries.items():
        assert type(registry) is Registry and registry.group == group
    assert [r.variable for r in registries] == ["FEDBENCH_PLUGINS", "FEDBENCH_PROTOCOLS", "FEDBENCH_DATASETS"]


@pytest.fixture
def shapes(tmp_path, monkeypatch):
    """A registry of strings, its decorator in package `shape_plugins` (the built-ins: `good`
    registers two, `broken` registers one and then raises), on sys.path for the test."""
    registry = Registry("shape", group="test.shapes", variable="TEST_SHAPES", error=ConfigError)
    package = tmp_path / "shape_plugins"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "good.py").write_text(
        "from conftest_shapes import REGISTRY\nREGISTRY.add('square', 'S')\nREGISTRY.add('circle', 'C')\n"
    )
    (package / "broken.py").write_text(
        "from conftest_shapes import REGISTRY\nREGISTRY.add('half', 'H')\nraise RuntimeError('no')\n"
    )
    monkeypatch.setitem(sys.modules, "conftest_shapes", types.SimpleNamespace(REGISTRY=registry))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(plugins, "entry_points", lambda group: [])
    before = set(sys.modules)
    yield registry
    # only the modules this test imported: a plugin file another test loaded stays its method's module
    for name in [m for m in set(sys.modules) - before if m.startswith(("shape_plugins", "fedbench_plugin_"))]:
        del sys.modules[name]


def test_the_built_ins_load_one_module_at_a_time(shapes):
    shapes.discover(builtin="shape_plugins")
    assert shapes.members == {"circle": "C", "square": "S"}  # the broken module's 'half' is undone
    assert (
        list(shapes.errors) == ["shape_plugins.broken"] and "RuntimeError: no" in shapes.errors["shape_plugins.broken"]
    )
    assert shapes.origins == {"circle": "fedbench", "square": "fedbench"}
    shapes.discover(builtin="shape_plugins")  # once per process: nothing loads twice
    assert len(shapes.members) == 2


def test_the_variable_names_modules_and_files_after_the_built_ins(shapes, tmp_path, monkeypatch):
    extra = tmp_path / "more_shapes.py"
    extra.write_text("from conftest_shapes import REGISTRY\nREGISTRY.add('star', '*')\n")
    taken = tmp_path / "taken.py"
    taken.write_text("from conftest_shapes import REGISTRY\nREGISTRY.add('square', 'another')\n")
    monkeypatch.setenv("TEST_SHAPES", f"{extra}, {taken}")
    with pytest.warns(SetupWarning, match="taken.py"):
        shapes.discover(builtin="shape_plugins")
    assert shapes.members["star"] == "*" and shapes.origins["star"] == f"file {extra}"
    assert shapes.members["square"] == "S"  # the first registration keeps its name
    label = f"{str(taken)!r} (TEST_SHAPES)"
    assert "shape name 'square' from file" in shapes.errors[label] and "choose another name" in shapes.errors[label]
    message = shapes.unknown("hexagon", "Add one with REGISTRY.add.")
    assert message.startswith("unknown shape 'hexagon'. Registered shapes: circle, square, star. Add one")
    assert "Plugins that failed to load:" in message and label in message


def test_entry_points_are_credited_to_their_package(shapes, monkeypatch):
    def load():
        shapes.add("triangle", "T")
        return types.ModuleType("triangle_plugin")

    point = types.SimpleNamespace(
        name="triangle",
        value="triangle_plugin",
        load=load,
        dist=types.SimpleNamespace(name="shapes-pkg", version="1.2"),
    )
    monkeypatch.setattr(plugins, "entry_points", lambda group: [point] if group == "test.shapes" else [])
    seen = []
    shapes.discover(builtin=(), accept=lambda loaded, name, origin: seen.append((loaded.__name__, name, origin)))
    assert shapes.members == {"triangle": "T"}
    assert shapes.origins["triangle"] == "plugin 'triangle' (package shapes-pkg)"
    assert shapes.packages == {"triangle": "shapes-pkg==1.2"}
    assert seen == [("triangle_plugin", "triangle", "plugin 'triangle' (package shapes-pkg)")]


def test_a_plugin_the_kind_refuses_is_undone(shapes, monkeypatch):
    point = types.SimpleNamespace(name="bad", value="x", load=lambda: shapes.add("bad", "B"), dist=None)
    monkeypatch.setattr(plugins, "entry_points", lambda group: [point])

    def refuse(loaded, name, origin):
        raise ConfigError(f"{name} is not a shape")

    shapes.discover(builtin=(), accept=refuse)
    assert shapes.members == {} and shapes.errors == {
        "'bad' (x, package unknown package)": "ConfigError: bad is not a shape"
    }


def test_a_plugin_the_user_named_that_fails_is_a_warning_not_silence(shapes, tmp_path, monkeypatch):
    """A run of a built-in with a broken FEDBENCH_PLUGINS file once said nothing about it."""
    monkeypatch.setenv("TEST_SHAPES", str(tmp_path / "missing.py"))
    with pytest.warns(SetupWarning, match=r"missing\.py.*failed to load.*TEST_SHAPES"):
        shapes.discover(builtin="shape_plugins")
    assert "square" in shapes.members  # the built-ins still load
