"""The method contract is declared once (`benchmark.method.CORE`, `OPTIONAL`, `CAPABILITIES`)
and everything that lists it is read from that declaration: the registry's HOOKS and
CLASS_ATTRIBUTES, `fedbench methods --describe`, `fedbench new-method`'s skeleton and the
contract table of docs/writing-a-method.md. These tests fail when the base class and the
declaration disagree, or when one of the lists drifts from it."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from benchmark import registry
from benchmark.cli.commands.methods import contract_lines, contract_table
from benchmark.cli.commands.new_method import render
from benchmark.hyperparameters import MethodError
from benchmark.method import CAPABILITIES, CONTRACT, CORE, HELPERS, OPTIONAL, Capabilities, FederatedMethod

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
        "benchmark/method.py's CORE / OPTIONAL / CAPABILITIES must name every public hook and attribute of "
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
    for m in CONTRACT:
        assert any(re.match(rf"^  (\* |  ){m.name}\b", line) for line in lines), m.name
    assert "  capabilities (optional performance opt-ins):" in lines


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
