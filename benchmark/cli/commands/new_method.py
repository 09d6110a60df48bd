"""`fedbench new-method NAME`: write a method skeleton with the core hooks of the contract
defined and the optional ones written as comments.

The skeleton's hook docstrings are FederatedMethod's own (when each hook runs, what it
must return, its default), so the generated file and the contract cannot drift apart.
"""

from __future__ import annotations

import inspect
import keyword
import textwrap
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parents[2] / "templates" / "method.py.tmpl"


def _error(message: str) -> Exception:
    from benchmark.registry import MethodError  # a user error: the CLI prints it, no traceback

    return MethodError(message)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "new-method",
        help="write a skeleton method file (the core hooks defined, the optional ones as comments)",
        description="Write NAME.py: a runnable method skeleton that defines the core hooks, each documented, "
        "and lists every optional hook and setting as a comment to uncomment. Put it in methods/ (or a package "
        "with a 'fedbench.methods' entry point); see docs/writing-a-method.md.",
    )
    p.add_argument("name", help="the method's name, a Python identifier (used as --method NAME and the file name)")
    p.add_argument(
        "--out",
        default=None,
        help="folder to write NAME.py into (default: methods/ inside a fedbench checkout; elsewhere a standalone "
        "package fedbench-NAME/ with an entry point is written)",
    )
    p.set_defaults(func=run)


def in_fedbench_checkout(folder: Path) -> bool:
    """Whether `folder` is the root of a fedbench source tree (where methods/ is the plugin folder)."""
    return (folder / "methods" / "__init__.py").is_file() and (folder / "benchmark" / "registry.py").is_file()


def run(args) -> int:
    from benchmark.cli.outputs import check_output_folder

    name = args.name
    if args.out is None and not in_fedbench_checkout(Path.cwd()):
        package = write_package(name, Path.cwd())
        module = package / f"fedbench_{name}" / "method.py"
        print(f"wrote the package {package} (entry point {name!r} in the group 'fedbench.methods')")
        print(
            f"next: edit {module}, then either `pip install -e {package}` (with fedbench installed from its "
            "checkout, `pip install -e /path/to/fedbench`: the PyPI project named fedbench is another one) and "
            f"`fedbench methods --describe {name} --backbone fedbench-toy-vit`, or without installing: "
            f"`fedbench run --method {module}:{class_name(name)} ...`"
        )
        return 0
    check_output_folder(args.out or "methods", "--out")  # a file in the way: exit 2, not a traceback
    path = write_skeleton(name, Path(args.out or "methods"))
    print(f"wrote {path}")
    print(f"next: edit it, then `{describe_command(name, path)}`")
    return 0


def describe_command(name: str, path: Path) -> str:
    """The command that describes the method just written: a file in the methods/ package of
    the fedbench that runs is a built-in; any other file is loaded through FEDBENCH_PLUGINS."""
    import methods

    builtin = path.resolve().parent in {Path(p).resolve() for p in methods.__path__}
    command = f"fedbench methods --describe {name} --backbone fedbench-toy-vit"
    return command if builtin else f"FEDBENCH_PLUGINS={path} {command}"


PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "fedbench-{name}"
version = "0.1.0"
description = "The {name} method for fedbench"
# fedbench is installed from its checkout, not from PyPI (the PyPI project named
# "fedbench" is an unrelated one): `pip install -e /path/to/fedbench` first, then
# `pip install -e .` here. No dependency line, so pip never pulls that other project.
dependencies = []

[project.entry-points."fedbench.methods"]
{name} = "fedbench_{name}.method"

[tool.setuptools]
packages = ["fedbench_{name}"]
"""


def write_package(name: str, parent: Path) -> Path:
    """fedbench-NAME/: pyproject.toml with the entry point and fedbench_NAME/method.py."""
    check_name(name)
    package = parent / f"fedbench-{name}"
    if package.exists():
        raise _error(f"{package} already exists; not overwriting it (choose another name or folder)")
    (package / f"fedbench_{name}").mkdir(parents=True)
    (package / "pyproject.toml").write_text(PYPROJECT.format(name=name))
    (package / f"fedbench_{name}" / "__init__.py").write_text(f'"""The {name} fedbench method (see method.py)."""\n')
    (package / f"fedbench_{name}" / "method.py").write_text(render(name))
    return package


def check_name(name: str) -> None:
    if not name.isidentifier() or keyword.iskeyword(name):
        raise _error(f"method name {name!r} must be a Python identifier, e.g. 'my_prompt'")
    from benchmark.registry import available_methods, method_origin

    if name in available_methods():
        raise _error(f"method name {name!r} is taken (registered by {method_origin(name)}); choose another name")


def write_skeleton(name: str, out: Path) -> Path:
    check_name(name)
    path = out / f"{name}.py"
    if path.exists():
        raise _error(f"{path} already exists; not overwriting it (choose another name or --out)")
    out.mkdir(parents=True, exist_ok=True)
    with path.open("x") as f:  # "x": never clobber a file that appeared meanwhile
        f.write(render(name))
    return path


# What the skeleton sets or does where FederatedMethod's default would not make it a runnable
# method (a CoOp context shared by all clients, PromptFL); every other attribute is written
# with its default and every other hook calls the default.
SKELETON_VALUES = {
    "upload_keys": '("ctx",)',
    "ranges": '{**OPTIMIZER_RANGES, "n_ctx": Range(ge=1)}',
    "tunable": '{"lr": LogUniform.around(0.002)}',
    "lr_schedule": "COSINE_OVER_LOCAL_STEPS",
    "frozen_image_features": "True",
}
SKELETON_BODIES = {
    "encode_classes": ["return F.normalize(self.prompts.encode(self.ctx, class_names), dim=-1)"],
    "configure_optimizers": [
        "hp = self.hparams",
        "trainable = [p for p in self.parameters() if p.requires_grad]",
        "return sgd_with_cosine(self, trainable, hp.lr, hp.momentum, hp.weight_decay)",
    ],
}


def render(name: str) -> str:
    """The skeleton: every attribute and hook of the contract (`benchmark.method_contract.CONTRACT`),
    part by part. The core hooks are defined, each with FederatedMethod's own docstring; the
    optional ones are written commented out (signature and when they run), so that
    `--describe` lists as overridden only what the skeleton really defines, and a reader sees
    every hook there is. Attributes the skeleton does not set are commented out likewise."""
    from benchmark.cli.commands.methods import contract_parts

    text = TEMPLATE.read_text()
    text = text.replace("@@NAME@@", name).replace("@@CLASS@@", class_name(name))
    attributes, hooks = [], []
    for title, members in contract_parts():
        core = title == "core"
        header = f"    # -- {title} " + "-" * (84 - len(title))
        set_here = [m for m in members if m.kind == "attribute"]
        if set_here:
            attributes += ["", header] if attributes else [header]
            for m in set_here:
                attributes += _comment(f"{m.when}. Default: {m.default}.")
                if core or m.name in SKELETON_VALUES:
                    attributes.append(f"    {m.name} = {SKELETON_VALUES.get(m.name, _literal(m.name))}")
                else:
                    attributes.append(f"    # {m.name} = {_literal(m.name)}")
        for k, m in enumerate(m for m in members if m.kind == "hook"):
            written = _hook(m.name) if core else _commented_hook(m.name)
            hooks += [*([""] if hooks else []), *([header] if k == 0 else []), *written]
    text = text.replace("@@ATTRIBUTES@@", "\n".join(attributes)).replace("@@HOOKS@@", "\n".join(hooks).rstrip())
    if "@@" in text:
        raise RuntimeError(f"template {TEMPLATE} has a marker this command does not fill")
    return text


def _comment(text: str) -> list[str]:
    text = text.replace("`", "")
    return textwrap.wrap(text[:1].upper() + text[1:], width=96, initial_indent="    # ", subsequent_indent="    # ")


def _literal(attribute: str) -> str:
    from benchmark.method import FederatedMethod

    value = getattr(FederatedMethod, attribute)
    return f'"{value}"' if isinstance(value, str) else repr(value)  # the formatter's double quotes


def _hook(hook: str) -> list[str]:
    """`def hook(...)` as FederatedMethod declares it, its docstring, and a body that calls the
    default (or the skeleton's own, SKELETON_BODIES)."""
    from benchmark.method import FederatedMethod

    signature = inspect.signature(getattr(FederatedMethod, hook))
    is_classmethod = isinstance(inspect.getattr_static(FederatedMethod, hook), classmethod)
    parameters = ["cls" if is_classmethod else "self"]
    for p in signature.parameters.values():
        if p.name == "self":
            continue
        annotation = "" if p.annotation is inspect.Parameter.empty else f": {p.annotation}"
        parameters.append(f"{p.name}{annotation}")
    returns = signature.return_annotation
    arrow = "" if returns is inspect.Signature.empty else f" -> {returns}"
    call = f"super().{hook}({', '.join(parameters[1:] and [p.split(':')[0] for p in parameters[1:]])})"
    body = SKELETON_BODIES.get(hook, [call if returns == "None" else f"return {call}"])
    doc = inspect.getdoc(getattr(FederatedMethod, hook))
    return [
        *(["    @classmethod"] if is_classmethod else []),
        f"    def {hook}({', '.join(parameters)}){arrow}:",
        textwrap.indent(f'"""{doc}"""', " " * 8),
        *(f"        {line}" for line in body),
    ]


def _commented_hook(hook: str) -> list[str]:
    """An optional hook as a comment: its signature and the first paragraph of its docstring
    (when it runs); uncomment it to override the default."""
    from benchmark.method import FederatedMethod

    lines = _hook(hook)
    signature = next(i for i, line in enumerate(lines) if line.startswith("    def "))
    doc = inspect.getdoc(getattr(FederatedMethod, hook)).split("\n\n")[0]
    return [
        *(f"    # {line.strip()}" for line in lines[: signature + 1]),
        *textwrap.wrap(doc, width=92, initial_indent="    #     ", subsequent_indent="    #     "),
        f"    #     (uncomment to override; see FederatedMethod.{hook})",
    ]


def class_name(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part) or "Method"
