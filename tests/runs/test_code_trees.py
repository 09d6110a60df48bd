"""A run's cell identity hashes the code of the modules it runs; their syntax trees and
imports are kept in the cache folder, so the next run reaches its first round without
parsing them again (issue 60, item 10: a 2-round toy run spent seconds before round 1)."""

from __future__ import annotations

import ast

import benchmark.runs.identity as identity

ROOTS = ("methods.promptfl", "benchmark.federation.simulator")


def clear_caches() -> None:
    for cached in (identity.modules_sha256, identity._module_imports, identity._code, identity._source):
        cached.cache_clear()


def test_the_stored_trees_give_the_hash_the_parsed_ones_give(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDBENCH_CACHE", str(tmp_path))
    clear_caches()
    parsed = identity.modules_sha256(ROOTS)
    assert list((tmp_path / "code-trees").rglob("*.txt")) and list((tmp_path / "module-imports").rglob("*.txt"))
    clear_caches()

    def no_parse(*args, **kwargs):
        raise AssertionError("parsed again although its tree was stored")

    monkeypatch.setattr(ast, "parse", no_parse)
    try:
        assert identity.modules_sha256(ROOTS) == parsed
    finally:
        monkeypatch.undo()
        clear_caches()
    monkeypatch.setenv("FEDBENCH_CACHE", str(tmp_path / "elsewhere"))
    assert identity.modules_sha256(ROOTS) == parsed  # parsed afresh: the same
    clear_caches()


def test_an_unwritable_cache_folder_only_costs_speed(tmp_path, monkeypatch):
    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setenv("FEDBENCH_CACHE", str(blocker))
    clear_caches()
    try:
        assert len(identity.modules_sha256(ROOTS)) == 16
    finally:
        clear_caches()
