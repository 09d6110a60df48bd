"""`fedbench new-method NAME`: write a method skeleton with every hook of the contract.

The skeleton's hook docstrings are FederatedMethod's own (when each hook runs, what it
must return, its default), so the generated file and the contract cannot drift apart.
"""

from __future__ import annotations

import inspect
import keyword
import textwrap
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent.parent / "templates" / "method.py.tmpl"


def _error(message: str) -> Exception:
    from benchmark.registry import MethodError  # a user error: the CLI prints it, no traceback

    return MethodError(message)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "new-method",
        help="write a skeleton method file (every hook, documented)",
        description="Write NAME.py: a runnable method skeleton with every hook a method can override, "
        "each documented. Put it in methods/ (or a package with a 'fedbench.methods' entry point); "
        "see docs/writing-a-method.md.",
    )
    p.add_argument("name", help="the method's name, a Python identifier (used as --method NAME and the file name)")
    p.add_argument("--out", default="methods", help="folder to write NAME.py into (default: methods)")
    p.set_defaults(func=run)


def run(args) -> int:
    path = write_skeleton(args.name, Path(args.out))
    print(f"wrote {path}")
    print(f"next: edit it, then `fedbench methods --describe {args.name} --backbone fedbench-tiny-vit`")
    return 0


def write_skeleton(name: str, out: Path) -> Path:
    if not name.isidentifier() or keyword.iskeyword(name):
        raise _error(f"method name {name!r} must be a Python identifier, e.g. 'my_prompt'")
    path = out / f"{name}.py"
    if path.exists():
        raise _error(f"{path} already exists; not overwriting it (choose another name or --out)")
    out.mkdir(parents=True, exist_ok=True)
    with path.open("x") as f:  # "x": never clobber a file that appeared meanwhile
        f.write(render(name))
    return path


def render(name: str) -> str:
    from benchmark.method import FederatedMethod
    from benchmark.registry import HOOKS

    text = TEMPLATE.read_text()
    text = text.replace("@@NAME@@", name).replace("@@CLASS@@", class_name(name))
    for hook in HOOKS:
        doc = inspect.getdoc(getattr(FederatedMethod, hook))
        text = text.replace(f"@@DOC {hook}@@", textwrap.indent(f'"""{doc}"""', " " * 8))
    if "@@" in text:
        raise RuntimeError(f"template {TEMPLATE} has a marker this command does not fill")
    return text


def class_name(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part) or "Method"
