"""The numerics a cell computes under are part of its identity: the precision `auto` resolves
to, an explicit `--tf32`, and the augmentation backend; a bf16 cell and a 32-true cell never
share a run folder (issue 48: the toy world's PromptFL on CUDA in bf16 and on CPU in 32-true
once ran under one name)."""

from __future__ import annotations

import pytest
from conftest import tiny_config

from benchmark.config import ConfigError
from benchmark.runs import numerics
from benchmark.runs.identity import cell_identity, run_name


@pytest.fixture
def on_a_gpu_machine(monkeypatch):
    """This process sees a GPU, as far as naming cells goes (nothing is built on it)."""
    monkeypatch.setattr(numerics, "cuda_available", lambda: True)


def test_a_bf16_cell_and_a_32_true_cell_never_share_a_run_folder(tmp_path, fake_data_root):
    fp32 = tiny_config(fake_data_root, tmp_path, method="promptfl", precision="32-true")
    bf16 = tiny_config(fake_data_root, tmp_path, method="promptfl", precision="bf16-mixed")
    assert run_name(fp32) != run_name(bf16)
    assert "_bf16_" in run_name(bf16) and "_bf16" not in run_name(fp32)  # said in the name, not only the hash
    assert cell_identity(bf16)["run"]["precision"] == "bf16-mixed"


def test_auto_precision_is_named_by_what_it_resolves_to_on_the_machine(
    tmp_path, fake_data_root, on_a_gpu_machine, monkeypatch
):
    # The same config (`--precision auto`, `--device auto`): bf16 on a GPU (PromptFL's gpu_precision) ...
    auto = tiny_config(fake_data_root, tmp_path, method="promptfl", precision="auto", device="auto")
    on_gpu = run_name(auto)
    assert cell_identity(auto)["run"]["precision"] == "bf16-mixed"
    explicit = tiny_config(fake_data_root, tmp_path, method="promptfl", precision="bf16-mixed", device="cuda")
    assert run_name(explicit) == on_gpu  # the resolved precision is the cell, not the word `auto`
    # ... 32-true on a CPU-only machine: another cell, another folder.
    monkeypatch.setattr(numerics, "cuda_available", lambda: False)
    assert cell_identity(auto)["run"]["precision"] == "32-true"
    assert run_name(auto) != on_gpu
    assert run_name(auto) == run_name(tiny_config(fake_data_root, tmp_path, method="promptfl", precision="32-true"))


def test_pfedmma_auto_is_32_true_on_a_gpu_and_tf32_is_a_cell_of_its_own(tmp_path, fake_data_root, on_a_gpu_machine):
    plain = tiny_config(fake_data_root, tmp_path, method="pfedmma", precision="auto", device="cuda")
    tf32 = tiny_config(fake_data_root, tmp_path, method="pfedmma", precision="auto", device="cuda", tf32=True)
    assert cell_identity(plain)["run"]["precision"] == "32-true"
    assert cell_identity(tf32)["run"]["tf32"] is True
    assert run_name(plain) != run_name(tf32)
    assert "_fp32tf32_" in run_name(tf32)


def test_the_augmentation_backend_is_recorded_resolved(tmp_path, fake_data_root, on_a_gpu_machine, monkeypatch):
    def identity(**overrides):
        return cell_identity(tiny_config(fake_data_root, tmp_path, **overrides))["run"]["augment_backend"]

    assert identity(augment=True, augment_backend="auto", device="cuda") == "device"
    assert identity(augment=True, augment_backend="auto", device="cpu") == "pil"  # the CPU keeps today's numbers
    assert identity(augment=True, augment_backend="pil", device="cuda") == "pil"
    assert identity(augment=False, augment_backend="auto", device="cuda") == "pil"  # nothing augmented
    auto_cpu = tiny_config(fake_data_root, tmp_path, augment=True, augment_backend="auto", device="cpu")
    pil_cpu = tiny_config(fake_data_root, tmp_path, augment=True, augment_backend="pil", device="cpu")
    device_cpu = tiny_config(fake_data_root, tmp_path, augment=True, augment_backend="device", device="cpu")
    assert run_name(auto_cpu) == run_name(pil_cpu) != run_name(device_cpu)


def test_bad_augment_backend_and_device_augmentation_without_augment_are_refused(tmp_path, fake_data_root):
    with pytest.raises(ConfigError, match="augment_backend = 'gpu' is invalid: expected auto | device | pil"):
        tiny_config(fake_data_root, tmp_path, augment_backend="gpu")
    config = tiny_config(fake_data_root, tmp_path, augment=False, augment_backend="device")
    with pytest.raises(ConfigError, match="augment is false.*Set --augment true"):
        numerics.check_numerics(config)
