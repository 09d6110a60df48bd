"""`fedbench datasets` cuts a long note to the table's width and prints the whole of every cut
note under the table: what to do about an incomplete dataset is mostly in its last words (a
fresh-clone walk of issue 50 saw "... The suite reads ..." and "Download the CoOp split
'split_zhou_Des..." with the rest nowhere)."""

from __future__ import annotations

import shutil

from fake_layouts import make_fake_dataset


def test_a_cut_note_is_printed_whole_under_the_table(fedbench, tmp_path):
    root = tmp_path / "D"
    dtd = make_fake_dataset("dtd", root, num_classes=3, per_class=4)
    (dtd.folder / "split_zhou_DescribableTextures.json").unlink()  # incomplete: the loader says what to fetch
    pacs = make_fake_dataset("pacs", root, num_classes=3, layout="DomainBed")
    shutil.copytree(pacs.folder, root / "pacs")  # the same dataset in a second place: FedMVP's
    done = fedbench("datasets", "--data-root", root)
    assert done.returncode == 0, done.stderr
    table, _, notes = done.stdout.partition("notes cut short above, in full (paths under the data root):\n")
    rows = {line.split()[0]: line for line in table.splitlines() if line.strip()}
    assert "incomplete" in rows["dtd"] and rows["dtd"].endswith("...")
    assert "incomplete" in rows["pacs"] and rows["pacs"].endswith("...")
    whole = {
        line.split(": ", 1)[0].strip(): line.split(": ", 1)[1] for line in notes.splitlines() if line.startswith("  ")
    }
    assert set(whole) == {"dtd", "pacs"}  # only the notes that were cut
    assert whole["dtd"].startswith("dtd: split file dtd/split_zhou_DescribableTextures.json is missing.")
    assert "Expected layout: dtd/images/" in whole["dtd"]
    assert "move or rename all but the one the runs should read" in whole["pacs"]
