"""benchmark/cli/inert.py: a listing computed with inert third-party packages leaves nothing
behind, and says when it cannot vouch for its answer (the listing then imports for real).
Each check runs in a fresh process: a test session has torch loaded, where call_inert refuses."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run_script(body: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(body)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done


def test_an_inert_call_forgets_what_it_imported_and_a_real_import_follows():
    run_script(
        """
        import sys
        import benchmark.protocol as protocol_before
        from benchmark.cli.inert import call_inert

        def domains():
            from data.catalog import dataset_info
            from benchmark.protocol_registry import protocol_class
            protocol_class("msst")  # registers the protocols, in modules of the call's own
            return list(dataset_info("pacs").domains)

        assert call_inert(domains) == ["art_painting", "cartoon", "photo", "sketch"]
        assert "torch" not in sys.modules
        assert not [name for name in sys.modules if name.split(".")[0] in ("data", "methods")]
        assert sys.modules["benchmark.protocol"] is protocol_before  # set aside, then put back
        assert not protocol_before.PROTOCOLS.loaded and not protocol_before.PROTOCOLS.members

        # the real modules, afresh: the loaders' classes are torch's again
        import torch
        from data.base import FileImages
        from data.catalog import dataset_info
        assert issubclass(FileImages, torch.utils.data.Dataset)
        assert dataset_info("pacs").domains == ("art_painting", "cartoon", "photo", "sketch")
        """
    )


def test_an_answer_it_cannot_vouch_for_is_not_inert():
    run_script(
        """
        from benchmark.cli.inert import NotInert, call_inert

        def stand_in():
            import torch
            return {"width": torch.nn.Linear(2, 3).out_features}  # a stand-in, not a number

        def fails():
            import torch
            return int(torch.ones(1))

        for fn in (stand_in, fails):
            try:
                call_inert(fn)
            except NotInert as exc:
                print(fn.__name__, exc)
            else:
                raise AssertionError(f"{fn.__name__}: no NotInert")
        import torch  # with real torch loaded, nothing is computed inert
        try:
            call_inert(lambda: 1)
        except NotInert as exc:
            assert "torch is loaded" in str(exc)
        else:
            raise AssertionError("computed inert beside real torch")
        """
    )
