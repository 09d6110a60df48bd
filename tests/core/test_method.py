"""The method contract is declared once (`benchmark.method_contract.CORE`, `OPTIONAL`, `CAPABILITIES`,
and `LIGHTNING`: what of a LightningModule local training reads and offers) and everything
that lists it is read from that declaration: the registry's HOOKS and CLASS_ATTRIBUTES,
`fedbench methods --describe`, `fedbench new-method`'s skeleton and the contract table of
docs/writing-a-method.md. These tests fail when the base class and the declaration disagree,
when one of the lists drifts from it, when a loop reads of a method anything it leaves out,
when a built-in method overrides a helper, or when a private Lightning name is imported."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import lightning as L
import pytest

from benchmark import registry
from benchmark.cli.commands.methods import contract_lines, contract_table
from benchmark.cli.commands.new_method import render
from benchmark.hyperparameters import MethodError
from benchmark.method import Capabilities, FederatedMethod
from benchmark.method_contract import CAPABILITIES, CONTRACT, CORE, HELPERS, LIGHTNING, OPTIONAL, UNCALLED_HOOKS

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "writing-a-method.md"
TABLE = re.compile(r"<!-- BEGIN contract table .*?-->\n(.*?)\n<!-- END contract table -->", re.S)


def public_members(cls: type) -> dict[str, str]:
    """name -> "hook" (a method or classmethod an author may override), "attribute" (class
    data an author may set) or "fact" (a read-only property), for the public names `cls`
    itself defines."""
    found = {}
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(value, property):
            found[name] = "fact"
        elif inspect.isfunction(value) or isinstance(value, (classmethod, staticmethod)):
            found[name] = "hook"
        else:
            found[name] = "attribute"
    return found


def test_the_declaration_names_every_public_hook_and_attribute_of_the_base_classes():
    declared = {m.name: m.kind for m in CONTRACT}
    assert len(declared) == len(CONTRACT), "a member is declared twice"
    found = {**public_members(FederatedMethod), **public_members(Capabilities)}
    facts = {n for n, kind in found.items() if kind == "fact"}  # backbone, trains, current_client, images_domain
    expected = {n: kind for n, kind in found.items() if n not in facts and n not in HELPERS and n != "name"}
    assert declared == expected, (
        "benchmark/method_contract.py's CORE / OPTIONAL / CAPABILITIES must name every public hook and attribute of "
        "FederatedMethod and Capabilities (helpers that are called, not overridden, go in HELPERS)"
    )
    assert set(HELPERS) <= {n for n, kind in found.items() if kind == "hook"}


def test_the_capabilities_are_the_mixins_and_the_core_is_small():
    assert {m.name for m in CAPABILITIES} == set(public_members(Capabilities))
    assert not set(public_members(Capabilities)) & set(vars(FederatedMethod))  # not redeclared in the core
    assert [m.name for m in CORE] == [
        "encode_images",
        "encode_classes",
        "classify",
        "training_step",
        "configure_optimizers",
        "upload_keys",
        "aggregate",
        "download",
    ]
    assert CONTRACT == CORE + OPTIONAL + CAPABILITIES


def test_each_hook_says_when_it_runs_what_it_returns_and_its_default():
    for m in CONTRACT:
        if m.kind == "hook":
            doc = inspect.getdoc(getattr(FederatedMethod, m.name))
            assert "Runs " in doc and "Returns" in doc and "Default:" in doc, m.name
        assert m.when and m.returns and m.default, m.name


def test_the_registry_lists_are_the_declaration():
    assert registry.HOOKS == tuple(m.name for m in CONTRACT if m.kind == "hook")
    assert registry.CLASS_ATTRIBUTES == tuple(m.name for m in CONTRACT if m.kind == "attribute")
    # An override is told apart for plain hooks and for the classmethod alike.
    methods = registry.available_methods()
    assert registry.overridden_hooks(methods["zeroshot"]) == ["encode_classes"]  # its own template
    assert "fit_to_backbone" in registry.overridden_hooks(methods["pfedmma"])
    assert "fit_to_backbone" not in registry.overridden_hooks(methods["promptfl"])
    assert {"class_inputs", "encode_class_inputs"} <= set(registry.overridden_hooks(methods["promptfl"]))


def test_the_guides_contract_table_is_the_generated_one():
    found = TABLE.search(GUIDE.read_text())
    assert found, "docs/writing-a-method.md has no <!-- BEGIN contract table ... --> block"
    assert found.group(1) == contract_table(), "run `python scripts/write_contract_table.py`"
    for m in CONTRACT:
        assert f"`{m.name}" in found.group(1)


def test_the_skeleton_and_describe_list_every_member(tiny_backbone):
    skeleton = render("contract_check")
    for m in CONTRACT:
        # every member is written; the core hooks defined, the optional ones as comments
        pattern = rf"^    (# )?def {m.name}\(" if m.kind == "hook" else rf"^    (# )?{m.name} = "
        assert re.search(pattern, skeleton, re.M), m.name
    for m in CORE:
        pattern = rf"^    def {m.name}\(" if m.kind == "hook" else rf"^    {m.name} = "
        assert re.search(pattern, skeleton, re.M), m.name
    promptfl = registry.build_method("promptfl", tiny_backbone)
    lines = contract_lines(type(promptfl), promptfl)
    for m in CONTRACT + LIGHTNING:
        assert any(re.match(rf"^  (\* |  ){m.name}\b", line) for line in lines), m.name
    assert "  capabilities (optional performance opt-ins):" in lines
    assert "    automatic_optimization = True" in lines


def test_describe_shows_fedmvp_s_lightning_surface_and_its_own_counts(tiny_backbone):
    fedmvp = registry.build_method("fedmvp", tiny_backbone)
    lines = contract_lines(type(fedmvp), fedmvp)
    assert "    automatic_optimization = False" in lines
    assert any(re.match(r"^  \* on_train_start +overridden in methods\.fedmvp\.FedMVP", line) for line in lines)
    assert any(re.match(r"^  \* parameter_counts +overridden in methods\.fedmvp\.FedMVP", line) for line in lines)


# -- the Lightning surface: declared, and the loops read nothing else ---------------------------

LOOPS = ("client_loop.py", "batched_training.py", "bare_loop.py")
# What the loops touch of a method that is not the method's to override or call: torch's
# training mode and parameters, its registered name, and the Fabric the loop attaches
# (`module.fabric`, Lightning's public attribute) with the optimizers `self.optimizers()`
# returns under it (`_fabric_optimizers`, which `Fabric.setup` sets: see
# `client_loop.offer_optimizers`, the one place it is written).
PLUMBING = {"train", "named_parameters", "name", "fabric", "_fabric_optimizers"}


def names_read_of_a_method(path: Path) -> dict[str, int]:
    """attribute -> first line, for every `module.x`, `hooks.x`, `method.x` and `self.method.x`."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("module", "hooks", "method"):
            found.setdefault(node.attr, node.lineno)
        elif isinstance(owner, ast.Attribute) and owner.attr == "method" and isinstance(owner.value, ast.Name):
            found.setdefault(node.attr, node.lineno)
    return found


def test_the_lightning_part_names_what_lightning_defines_and_federated_method_does_not_redefine():
    declared = [m.name for m in LIGHTNING]
    assert len(set(declared)) == len(declared)
    for m in LIGHTNING:
        assert hasattr(L.LightningModule, m.name), m.name
        assert m.name not in vars(FederatedMethod) and m.name not in vars(Capabilities), m.name
        assert m.when and m.returns and m.default, m.name
    assert not set(declared) & set(UNCALLED_HOOKS) and not set(declared) & {m.name for m in CONTRACT}
    from benchmark.federation import client_loop

    for m in LIGHTNING:  # the loop's own description of what it calls and offers names each one
        assert m.name in client_loop.__doc__, m.name


def test_every_name_a_loop_reads_of_a_method_is_declared():
    declared = {m.name for m in CONTRACT + LIGHTNING} | set(HELPERS) | PLUMBING
    undeclared = []
    for loop in LOOPS:
        path = ROOT / "benchmark" / "federation" / loop
        for name, line in names_read_of_a_method(path).items():
            if name not in declared:
                undeclared.append(f"{loop}:{line} reads `{name}`")
    assert not undeclared, (
        "declare what local training reads of a method in benchmark/method_contract.py (LIGHTNING for Lightning's "
        "surface, CONTRACT for fedbench's), or stop reading it:\n" + "\n".join(undeclared)
    )
    assert "on_train_start" in names_read_of_a_method(ROOT / "benchmark" / "federation" / "client_loop.py")


def test_no_built_in_method_overrides_a_helper():
    overriding = [
        f"{name}.{helper}"
        for name, cls in registry.builtin_methods().items()
        for helper in HELPERS
        if registry.overrides(cls, helper)
    ]
    assert not overriding, "HELPERS are called, never overridden: declare it in the contract instead"


# `from lightning.pytorch.core.optimizer import _configure_optimizers`, `import lightning._x`,
# `lightning.pytorch._y`: Lightning's private API, which changes without notice.
LIGHTNING_PACKAGES = ("lightning", "pytorch_lightning", "lightning_fabric", "lightning_utilities")


def private_lightning_uses(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        modules, names = [], []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules, names = [node.module], [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        for module in modules:
            parts = module.split(".")
            if parts[0] not in LIGHTNING_PACKAGES:
                continue
            private = [p for p in parts[1:] if p.startswith("_")] + [n for n in names if n.startswith("_")]
            if private:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {module} {private}")
    return found


def test_no_private_lightning_name_is_imported():
    found = []
    for folder in ("benchmark", "data", "methods", "scripts", "flower", "tests"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            found += private_lightning_uses(path)
    assert not found, "use Lightning's public API (or fedbench's own code) instead of:\n" + "\n".join(found)


# -- values: ranges and Literal are the only checks ------------------------------------------


def ranged_and_chosen():
    cases = []
    for name, cls in registry.builtin_methods().items():
        for h in registry.hyperparameters(cls):
            if h.choices or h.range is not None:
                cases.append(pytest.param(name, h, id=f"{name}.{h.name}"))
    return cases


@pytest.mark.parametrize(("method", "h"), ranged_and_chosen())
def test_a_bad_value_is_refused_before_anything_is_built_naming_it_what_it_takes_and_the_fix(method, h):
    if h.choices:
        bad, expected = "not-a-choice", f"must be one of {', '.join(map(repr, h.choices))}"
    else:
        bound = h.range.ge if h.range.ge is not None else h.range.gt
        bad = (bound - 1) if bound is not None else (h.range.le if h.range.le is not None else h.range.lt) + 1
        expected = f"must be {h.range}"
    with pytest.raises(MethodError) as refused:
        registry.check_method_args(method, {h.name: bad})
    message = str(refused.value)
    flag = f"--{h.name.replace('_', '-')}"
    assert f"method {method!r}: hyperparameter {h.name!r} {expected}, got {bad!r}" in message
    assert f"pass {flag} with" in message and "\n" not in message


def test_literal_choices_replace_the_hand_checked_strings():
    """FedOTP's `ot`, FedMVP's fidelity switches and pFedMoAP's `selection` are Literal: the
    allowed values show in --describe and the manifest, and no __init__ checks them again."""
    chosen = {
        (name, h.name): h.choices
        for name, cls in registry.builtin_methods().items()
        for h in registry.hyperparameters(cls)
        if h.choices
    }
    assert chosen[("fedotp", "ot")] == ("COT", "Sinkhorn")
    assert chosen[("pfedmoap", "selection")] == ("nearest", "random")
    for switch in ("local_steps", "lora_check", "lora_trainable"):
        assert chosen[("fedmvp", switch)] == ("paper", "code")
