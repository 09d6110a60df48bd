"""`aggregation: samples | uniform`: a run setting that decides the server's client weights."""

from __future__ import annotations

import torch
from conftest import tiny_config
from torch import nn

from benchmark.method import ClientUpdate, FederatedMethod, fedavg
from benchmark.registry import register_method
from benchmark.runs.identity import cell_hash
from benchmark.runs.runner import run_experiment


@register_method("test_client_stamp")
class ClientStamp(FederatedMethod):
    """Test-only method: each client's upload is a known number (its id + 1), so the
    server's aggregate shows the weights it used."""

    upload_keys = ("stamp",)
    frozen_image_features = True

    def __init__(self, backbone) -> None:
        super().__init__(backbone)
        self.stamp = nn.Parameter(torch.zeros(3))

    def training_step(self, batch, batch_idx):
        return (self.stamp * 0.0).sum()  # a real (zero) gradient step; the value is set below

    def on_train_end(self) -> None:
        with torch.no_grad():
            self.stamp.fill_(self.current_client.client_id + 1.0)

    def configure_optimizers(self):
        return torch.optim.SGD([self.stamp], lr=0.0)


def test_fedavg_uses_the_update_weight():
    a, b = torch.tensor([1.0, 2.0]), torch.tensor([3.0, -1.0])
    by_samples = fedavg([ClientUpdate(0, 10, {"w": a}), ClientUpdate(1, 30, {"w": b})])
    assert torch.allclose(by_samples["w"], (10 * a + 30 * b) / 40)
    uniform = fedavg([ClientUpdate(0, 10, {"w": a}, 1.0), ClientUpdate(1, 30, {"w": b}, 1.0)])
    assert torch.allclose(uniform["w"], (a + b) / 2)


def test_uniform_aggregation_is_the_plain_mean_over_clients_of_different_sizes(fake_data_root, tmp_path):
    # 12 classes -> 6 base classes dealt to 5 clients: one gets 2 classes (8 images), the others 1 (4).
    results = {}
    for aggregation in ("samples", "uniform"):
        config = tiny_config(
            fake_data_root, tmp_path, method="test_client_stamp", clients=5, shots=4, rounds=1, aggregation=aggregation
        )
        result = run_experiment(config, write=True, progress=False)
        results[aggregation] = (config, result)
    config, result = results["samples"]
    from benchmark.backbone import load_backbone
    from benchmark.protocol_registry import get_protocol
    from benchmark.runs.preparation import load_run_dataset

    dataset = load_run_dataset(config, load_backbone(config.backbone, None))
    sizes = [c.num_samples for c in get_protocol("base2novel").partition(dataset, config).clients]
    assert len(set(sizes)) > 1, sizes  # the point of the test: clients of different sizes
    stamps = torch.arange(1.0, 6.0)
    weights = torch.tensor(sizes, dtype=torch.float64)
    expected = {
        "samples": float((stamps.double() * weights).sum() / weights.sum()),
        "uniform": float(stamps.mean()),
    }
    assert expected["samples"] != expected["uniform"]
    for aggregation, (config, result) in results.items():
        for state in result.federation.client_states.values():  # every client received the aggregate
            assert torch.allclose(state["stamp"].double(), torch.full((3,), expected[aggregation], dtype=torch.float64))
        assert (result.run_dir / "config.yaml").read_text().count(f"aggregation: {aggregation}") == 1
    assert cell_hash(results["samples"][0]) != cell_hash(results["uniform"][0])


def test_aggregation_value_is_checked(fake_data_root, tmp_path):
    import pytest

    from benchmark.config import ConfigError

    with pytest.raises(ConfigError, match="aggregation = 'mean' is invalid: expected samples or uniform"):
        tiny_config(fake_data_root, tmp_path, aggregation="mean")
