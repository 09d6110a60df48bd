"""The method contract, checked the same way for every registered method (issue 49, item 8;
in the manner of torchmetrics' shared tester): each built-in method of methods/ and a plugin
defined here, registered as docs/writing-a-method.md says, runs the same four checks on the
tiny CLIP:

- state round trip: a client's state (after a download and a toy round), saved and loaded
  into a method built from another seed, gives the same state and the same logits, bit for bit;
- upload / aggregate / download: every `upload_keys` pattern names state, the aggregate of
  two clients' uploads has the uploads' keys, shapes and dtypes (and of two equal uploads is
  that upload), and `download` returns a partial state of the method's own keys and shapes,
  computed from its arguments alone (not from the module's current parameters);
- a toy step moves only trainable parameters: the frozen backbone is unchanged bit for bit, so
  is every parameter with requires_grad=False; a method that trains moves some parameter;
- determinism: the same seed gives the same loss and the same trained state, bit for bit.

A toy round is the simulator's local training (`ClientLoop`, CPU, 32-true) over two batches
of four random 32x32 images of three classes. The methods registered by other test modules
are left out: the parametrization must not depend on which modules pytest imported first.
"""

from __future__ import annotations

import fnmatch
import io
import json
import math

import pytest
import torch
import torch.nn.functional as F
from conftest import TINY_METHOD_ARGS
from torch import nn

from benchmark.backbone import Backbone
from benchmark.federation.client_loop import ClientLoop
from benchmark.method import OPTIMIZER_RANGES, ClientContext, ClientUpdate, FederatedMethod, LogUniform, Range
from benchmark.optim import sgd_with_cosine
from benchmark.prompts import ContextPrompts
from benchmark.registry import available_methods, build_method, register_method

PLUGIN = "test_conformance_plugin"


@register_method(PLUGIN)
class MedianContext(FederatedMethod):
    """A plugin as an outside package would write it: a CoOp context added to a frozen random
    one, aggregated by the coordinate-wise median (no weights), and a personal logit scale."""

    lr_schedule = "SGD, cosine from lr to 0 over each client-round's steps"
    upload_keys = ("ctx",)
    tunable = {"lr": LogUniform.around(0.002)}
    ranges = {**OPTIMIZER_RANGES, "n_ctx": Range(ge=1)}

    def __init__(
        self,
        backbone: Backbone,
        n_ctx: int = 4,
        lr: float = 0.002,
        momentum: float = 0.9,
        weight_decay: float = 5e-4,
    ) -> None:
        """Args:
        n_ctx: number of learned context vectors before the class name.
        lr: SGD learning rate, decayed by a cosine over the client-round.
        momentum: SGD momentum.
        weight_decay: SGD weight decay.
        """
        super().__init__(backbone)
        self.save_hyperparameters(ignore=["backbone"])
        self.prompts = ContextPrompts(backbone, n_ctx)
        width = backbone.text.width
        self.base_ctx = nn.Parameter(torch.randn(n_ctx, width) * 0.02, requires_grad=False)  # frozen state
        self.ctx = nn.Parameter(torch.zeros(n_ctx, width))  # uploaded
        self.log_scale = nn.Parameter(torch.zeros(()))  # personal

    def encode_classes(self, class_names):
        return F.normalize(self.prompts.encode(self.base_ctx + self.ctx, class_names), dim=-1)

    def classify(self, image_features, class_features):
        return super().classify(image_features, class_features) * self.log_scale.exp()

    def aggregate(self, updates):
        return {key: torch.stack([u.state[key] for u in updates]).median(dim=0).values for key in updates[0].state}

    def configure_optimizers(self):
        hp = self.hparams
        trainable = [p for p in self.parameters() if p.requires_grad]
        return sgd_with_cosine(self, trainable, hp.lr, hp.momentum, hp.weight_decay)


def conformance_methods() -> list[str]:
    """Every built-in method and this module's plugin."""
    return sorted(
        name for name, cls in available_methods().items() if cls.__module__.startswith("methods.") or name == PLUGIN
    )


METHODS = conformance_methods()
CLASSES = ("texture_a", "texture_b", "texture_c")


@pytest.fixture(scope="module")
def attributes(tmp_path_factory):
    """Class attributes of CLASSES, for the methods that read them (FedMVP)."""
    from data.attributes import load_class_attributes

    folder = tmp_path_factory.mktemp("conformance") / "attributes"
    folder.mkdir()
    (folder / "dtd.json").write_text(
        json.dumps({name.replace("_", " "): [f"colour {i}", f"pattern {i}"] for i, name in enumerate(CLASSES)})
    )
    return load_class_attributes("dtd", CLASSES, folder.parent, folder)


def build(name, backbone, attributes, seed=0) -> FederatedMethod:
    """Method `name` on the tiny CLIP, built under `seed` as a run builds it."""
    torch.manual_seed(seed)
    method = build_method(name, backbone, TINY_METHOD_ARGS.get(name))
    if method.uses_class_attributes:
        method.set_class_attributes(attributes)
    return method


def images(seed: int, count: int = 4) -> torch.Tensor:
    return torch.randn(count, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


def toy_round(method, client_id: int = 0, seed: int = 0, round_number: int = 1) -> float:
    """One client-round of local training as the simulator runs it: two batches of four
    images, one epoch, a fresh `ClientLoop`. Returns the round's loss (nan: not logged)."""
    if not method.trains:  # the simulator trains nothing (zero-shot CLIP)
        return math.nan
    labels = torch.tensor([0, 1, 2, (client_id + seed) % 3])
    batches = [(images(100 * seed + client_id), labels), (images(100 * seed + client_id + 50), labels.flip(0))]
    method.set_client(ClientContext(client_id, round_number, CLASSES, 8, rounds=2, participations=round_number - 1))
    torch.manual_seed(seed)
    try:
        return ClientLoop("cpu", "32-true").fit(method, batches, 1, CLASSES).loss
    finally:
        method.set_client(None)


def logits(method) -> torch.Tensor:
    method.eval()
    with torch.no_grad():
        return method.logits(images(7, 5), CLASSES)


def assert_same_state(got, expected, what: str) -> None:
    assert got.keys() == expected.keys(), what
    for key, value in expected.items():
        assert got[key].dtype == value.dtype and torch.equal(got[key], value), f"{what}: {key} differs"


def same_loss(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


class TrainedPair:
    """Clients 0 and 1 after one toy round each from the same initial state (built with seed
    0), and their uploads: computed once per method for the checks that read them."""

    def __init__(self, name, backbone, attributes) -> None:
        method = build(name, backbone, attributes)
        self.initial = method.client_state()
        self.states, self.losses = {}, {}
        for client_id in (0, 1):
            method.load_client_state(self.initial)
            self.losses[client_id] = toy_round(method, client_id)
            self.states[client_id] = method.client_state()
        self.uploads = {cid: method.upload_of(state) for cid, state in self.states.items()}
        self.method = method


@pytest.fixture(scope="module")
def trained(tiny_backbone, attributes):
    pairs: dict[str, TrainedPair] = {}

    def get(name: str) -> TrainedPair:
        if name not in pairs:
            pairs[name] = TrainedPair(name, tiny_backbone, attributes)
        return pairs[name]

    return get


def test_the_suite_covers_every_module_of_methods_and_the_plugin():
    import pkgutil

    import methods

    modules = {f"methods.{info.name}" for info in pkgutil.iter_modules(methods.__path__)}
    covered = {available_methods()[name].__module__ for name in METHODS if name != PLUGIN}
    assert covered == modules and PLUGIN in METHODS and "zeroshot" in METHODS


@pytest.mark.parametrize("name", METHODS)
class TestMethodContract:
    def test_state_round_trip_gives_identical_state_and_outputs(self, name, trained, tiny_backbone, attributes):
        pair = trained(name)
        method = pair.method
        # A client's state after a download (with another client in the bank) and a toy round.
        aggregate = method.aggregate([ClientUpdate(cid, 8, upload) for cid, upload in pair.uploads.items()])
        method.load_client_state(pair.states[0])
        method.load_client_state(method.download(0, aggregate, dict(pair.uploads)))
        toy_round(method, 0, seed=1, round_number=2)
        state = method.client_state()
        expected = logits(method)

        buffer = io.BytesIO()
        torch.save(state, buffer)
        buffer.seek(0)
        other = build(name, tiny_backbone, attributes, seed=1)  # another initial state
        other.load_client_state(torch.load(buffer, weights_only=True))
        assert_same_state(other.client_state(), state, f"{name} after load_client_state")
        assert torch.equal(logits(other), expected), f"{name}: the loaded state classifies differently"
        # and back into the first module: a state loaded over itself changes nothing
        method.load_client_state(method.client_state())
        assert torch.equal(logits(method), expected)

    def test_uploads_aggregate_and_download_keep_the_state_shapes(self, name, trained):
        pair = trained(name)
        method = pair.method
        own = pair.initial
        for pattern in method.upload_keys:  # a pattern that names no state is a typo
            assert any(fnmatch.fnmatchcase(k, pattern) for k in own), (
                f"{name}: upload_keys pattern {pattern!r} matches no state key of {sorted(own)[:8]}"
            )
        uploads = pair.uploads
        assert uploads[0].keys() == {k for k in own if method.is_uploaded(k)}
        aggregate = method.aggregate([ClientUpdate(0, 3, uploads[0]), ClientUpdate(1, 5, uploads[1])])
        assert aggregate.keys() == uploads[0].keys(), f"{name}: the aggregate's keys are not the uploads'"
        for key, value in aggregate.items():
            assert value.shape == own[key].shape and value.dtype == own[key].dtype, f"{name}: aggregate {key}"
        consensus = method.aggregate([ClientUpdate(0, 3, uploads[0]), ClientUpdate(1, 5, uploads[0])])
        for key, value in consensus.items():
            assert torch.allclose(value.double(), uploads[0][key].double(), atol=1e-6), f"{name}: consensus {key}"

        bank = dict(uploads)
        for client_id in (0, 1, 2):  # 2 has never uploaded
            received = method.download(client_id, aggregate, bank)
            unknown = set(received) - set(own)
            assert not unknown, f"{name}: download sends keys the method does not have: {sorted(unknown)}"
            for key, value in received.items():
                assert value.shape == own[key].shape and value.dtype == own[key].dtype, f"{name}: download {key}"
            # a function of its arguments and hyperparameters, not of the module's parameters
            # (on Flower the server's module is no client's)
            method.load_client_state(pair.states[1 - client_id % 2])
            assert_same_state(method.download(client_id, aggregate, bank), received, f"{name}: download again")
            method.load_client_state(received)  # what a client loads

    def test_a_toy_round_moves_only_trainable_parameters(self, name, tiny_backbone, attributes):
        method = build(name, tiny_backbone, attributes)
        backbone_before = {k: v.detach().clone() for k, v in tiny_backbone.state_dict().items()}
        before = method.client_state()
        trainable = {k for k, p in method.named_parameters() if p.requires_grad}
        buffers = {k for k, _ in method.named_buffers()}
        toy_round(method)
        assert_same_state(tiny_backbone.state_dict(), backbone_before, f"{name}: the frozen backbone")
        assert all(not p.requires_grad and p.grad is None for p in tiny_backbone.parameters()), name
        after = method.client_state()
        moved = {k for k in before if not torch.equal(before[k], after[k])}
        assert moved <= trainable | buffers, f"{name}: frozen parameters moved: {sorted(moved - trainable - buffers)}"
        if method.trains:
            assert moved & trainable, f"{name}: a toy round moved no trainable parameter"
        else:
            assert not moved

    def test_the_same_seed_gives_the_same_loss_and_parameters(self, name, trained, tiny_backbone, attributes):
        pair = trained(name)
        again = build(name, tiny_backbone, attributes)
        assert_same_state(again.client_state(), pair.initial, f"{name}: the initial state under seed 0")
        loss = toy_round(again, 0)
        assert same_loss(loss, pair.losses[0]), f"{name}: loss {loss} != {pair.losses[0]}"
        if again.trains:
            assert not math.isnan(loss), f"{name}: no train_loss logged"
        assert_same_state(again.client_state(), pair.states[0], f"{name}: the trained state under seed 0")
