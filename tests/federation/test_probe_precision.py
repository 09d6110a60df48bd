"""The batching probe's tolerance follows the run's precision, and both of its sides run on the
same kernels (issue 48: on a GPU in bf16 it refused every method, its fp32 tolerances against
bf16's rounding)."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_config

from benchmark.federation.batched_training import BatchedTraining, probe, probe_tolerances
from benchmark.federation.client_loop import ClientLoop
from benchmark.federation.stacked import comparable_kernels
from benchmark.runs.preparation import prepare_run


def test_tolerances_scale_with_the_half_types_unit_roundoff():
    assert probe_tolerances("32-true") == (1e-5, 1e-3)
    assert probe_tolerances("bf16-mixed") == (4 * 2.0**-8, 32 * 2.0**-8)  # 1.6e-2, 0.125
    assert probe_tolerances("16-mixed") == (4 * 2.0**-11, 32 * 2.0**-11)


def probe_clients(config, spread: float):
    run = prepare_run(config, progress=False)
    simulator, method = run.simulator(), run.method
    starts, clients = [], []
    for cid in (0, 1):
        generator = torch.Generator().manual_seed(cid)
        starts.append(
            {k: v + spread * torch.randn(v.shape, generator=generator) for k, v in method.client_state().items()}
        )
        clients.append((cid, *simulator.client_data(cid, 0)))
    return method, starts, clients


def test_a_bf16_probe_passes_where_batching_is_right_and_fails_where_it_is_wrong(tmp_path, fake_data_root):
    config = tiny_config(fake_data_root, tmp_path, method="promptfl", precision="bf16-mixed", clients=4)
    method, starts, clients = probe_clients(config, 0.05)
    training = BatchedTraining(method, ClientLoop("cpu", "bf16-mixed"))
    assert probe(training, starts, clients) is None
    # A batched step that mixes the clients up (each row trained on the other's state) is off
    # by far more than bf16's rounding: refused.
    swapped = BatchedTraining(method, ClientLoop("cpu", "bf16-mixed"))
    original = swapped._losses

    def crossed(stacked, rows, batches, classes):
        return original({k: v.flip(0) for k, v in stacked.items()}, rows, batches, classes)

    swapped._losses = crossed
    reason = probe(swapped, starts, clients)
    assert reason is not None and "differs from the client loop's" in reason


def test_the_probe_runs_both_sides_without_tf32_and_restores_the_flags():
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        with comparable_kernels():
            assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
            assert not torch.backends.mha.get_fastpath_enabled()  # attention as matrix products
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


@pytest.mark.gpu
def test_batched_training_engages_on_cuda_under_each_methods_precision(tmp_path, fake_data_root):
    """On the GPU, for a bf16 method and a 32-true one, the probe passes (same kernels, the
    precision's tolerance): the clients train together."""
    for method in ("promptfl", "pfedmma"):
        config = tiny_config(fake_data_root, tmp_path, method=method, device="cuda", precision="auto", clients=4)
        module, starts, clients = probe_clients(config, 0.05)
        loop = ClientLoop("gpu", "bf16-mixed" if method == "promptfl" else "32-true")
        assert probe(BatchedTraining(module, loop), starts, clients) is None, method
