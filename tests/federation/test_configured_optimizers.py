"""What `configure_optimizers` returns is read as a Trainer reads it: every documented form is
fitted once by a real `lightning.Trainer` and its public `optimizers` and
`lr_scheduler_configs` compared with `read_configured`'s; what a Trainer only warns about is
refused with a message naming it."""

from __future__ import annotations

import warnings

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from benchmark.federation.configured_optimizers import ConfiguredOptimizersError, read_configured


class Tiny(L.LightningModule):
    """One parameter; `configure_optimizers` returns what `form` builds over it."""

    def __init__(self, form, automatic: bool) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(2))
        self.form, self.configured = form, None
        self.automatic_optimization = automatic

    def training_step(self, batch, batch_idx):
        loss = (self.weight * batch[0]).sum()
        if self.automatic_optimization:
            return loss
        return None  # manual: nothing stepped, only read

    def configure_optimizers(self):
        self.configured = self.form(self.weight)
        return self.configured


def sgd(weight):
    return torch.optim.SGD([weight], lr=0.1)


def cosine(optimizer):
    return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=4)


def _two_dicts(w):
    first, second = sgd(w), sgd(w)
    return [
        {"optimizer": first, "lr_scheduler": {"scheduler": cosine(first), "interval": "step"}},
        {"optimizer": second},
    ]


def _with(entry):
    def form(w):
        optimizer = sgd(w)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": cosine(optimizer), **entry}}

    return form


def _one_cycle(w):
    optimizer = sgd(w)
    return {
        "optimizer": optimizer,
        "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1.0, total_steps=4)},
    }


def _lists(w):
    optimizer = sgd(w)
    return [optimizer], [cosine(optimizer)]


def _lone(w):
    optimizer = sgd(w)
    return [optimizer], cosine(optimizer)


def _bare(w):
    optimizer = sgd(w)
    return {"optimizer": optimizer, "lr_scheduler": cosine(optimizer)}


FORMS = {
    "optimizer": sgd,
    "list of one": lambda w: [sgd(w)],
    "tuple of two": lambda w: (sgd(w), sgd(w)),
    "two lists": _lists,
    "two lists, a lone scheduler": _lone,
    "dict": lambda w: {"optimizer": sgd(w)},
    "bare scheduler": _bare,
    "default interval": _with({}),
    "step, frequency, name": _with({"interval": "step", "frequency": 2, "name": "cosine"}),
    "list of dicts": _two_dicts,
    "one-cycle per epoch": _one_cycle,
}
SEVERAL = {"tuple of two", "list of dicts"}  # several optimizers: manual optimization only


def trainer_reading(form, automatic: bool):
    """(optimizers, lr_scheduler_configs) as a Trainer fitting `form` holds them, the form
    returned, and the warnings it gave."""
    module = Tiny(form, automatic)
    trainer = L.Trainer(
        max_epochs=1,
        limit_train_batches=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(module, DataLoader(TensorDataset(torch.ones(1, 2)), batch_size=1))
    said = [str(w.message) for w in caught if "OneCycleLR" in str(w.message)]
    return (trainer.optimizers, trainer.lr_scheduler_configs), module.configured, said


# A Trainer refuses several optimizers under automatic optimization, and so does the client
# loop (tests/federation/test_client_loop.py): those forms are compared under manual only.
READINGS = [(name, automatic) for name in FORMS for automatic in (True, False) if not (automatic and name in SEVERAL)]


@pytest.mark.parametrize(
    ("name", "automatic"), READINGS, ids=[f"{n}-{'automatic' if a else 'manual'}" for n, a in READINGS]
)
def test_every_form_is_read_as_a_trainer_reads_it(name, automatic):
    expected, configured, trainer_said = trainer_reading(FORMS[name], automatic)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        read = read_configured(configured, automatic)
    assert read == expected  # the same optimizer objects; LRSchedulerConfig compares every field
    assert [str(w.message) for w in caught] == trainer_said  # the one-cycle warning, where a Trainer gives it
    assert bool(trainer_said) == (name == "one-cycle per epoch" and automatic)


@pytest.mark.parametrize(
    ("form", "said"),
    [
        (lambda w: {"optimizer": sgd(w), "lr_sheduler": None}, r"unknown keys \['lr_sheduler'\]"),
        (lambda w: {"optimizer": "sgd"}, r'"optimizer": str'),
        (_with({"every": 2}), r"scheduler dict with the unknown keys \['every'\]"),
        (lambda w: {"optimizer": sgd(w), "lr_scheduler": {"interval": "step"}}, r'scheduler dict with no "scheduler"'),
        (_with({"interval": "batch"}), r'"interval": \'batch\'; it is "step" or "epoch"'),
        (lambda w: None, r"returned None; return one of: an optimizer"),
        (lambda w: [sgd(w), "adam"], r"returned a list of SGD, str; return one of"),
        (lambda w: {"optimizer": sgd(w), "lr_scheduler": cosine(sgd(w))}, r"whose optimizer is not among"),
    ],
    ids=["misspelt key", "not an optimizer", "scheduler key", "no scheduler", "interval", "None", "list", "stray"],
)
def test_what_a_trainer_would_only_warn_about_or_refuse_is_refused_naming_it(form, said):
    weight = torch.nn.Parameter(torch.ones(2))
    with pytest.raises(ConfiguredOptimizersError, match=said) as refused:
        read_configured(form(weight), True, "Mine.configure_optimizers")
    assert str(refused.value).startswith("Mine.configure_optimizers returned")
