"""Execute notebooks/results.ipynb and write it back with its outputs.

    python scripts/make_notebook.py            # from anywhere; the notebook finds the checkout itself

The notebook reads results/toy (the rendered preset table) and makes two tiny toy runs in
a temporary folder for its "single runs" part; FEDBENCH_RESULTS / FEDBENCH_RUNS point it
elsewhere. Execution metadata (timestamps) is dropped so a rerun only changes real outputs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "results.ipynb"


def main() -> int:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    # Run from the notebook's folder, as Jupyter does when the file is opened.
    NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    ).execute()
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
    errors = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    if errors:
        print(f"the notebook raised: {errors[0].ename}: {errors[0].evalue}; {NOTEBOOK} left unchanged", file=sys.stderr)
        return 1
    nbformat.write(notebook, NOTEBOOK)
    print(f"wrote {NOTEBOOK}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
