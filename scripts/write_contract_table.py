"""Write the method contract's table into docs/writing-a-method.md (between its
`<!-- BEGIN contract table -->` and `<!-- END contract table -->` lines) from the one
declaration of the contract, `benchmark.method_contract.CORE` / `OPTIONAL` / `CAPABILITIES`. Run it
after changing that declaration; `tests/core/test_method.py` fails until you do.
Usage: python scripts/write_contract_table.py"""

from __future__ import annotations

import re
from pathlib import Path

from benchmark.cli.commands.methods import contract_table
from benchmark.files import atomic_write

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "writing-a-method.md"
BLOCK = re.compile(r"(<!-- BEGIN contract table .*?-->\n)(?:.*?\n)??(<!-- END contract table -->)", re.S)

if __name__ == "__main__":
    text = GUIDE.read_text()
    if not BLOCK.search(text):
        raise SystemExit(f"{GUIDE} has no <!-- BEGIN contract table ... --> ... <!-- END contract table --> block")
    atomic_write(GUIDE, BLOCK.sub(lambda m: m.group(1) + contract_table() + "\n" + m.group(2), text))
    print(f"wrote the contract table of {GUIDE}")
