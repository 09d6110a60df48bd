"""One long-lived loader over a federation's whole schedule, for training images decoded and
augmented with PIL in worker processes (`--num-workers N`, `--augment-backend pil`).

A DataLoader per client-round forks its workers again at every local epoch (an iterator per
pass, no persistent workers) and prefetches nothing across clients: on a GPU the model then
waits for every client-round's first batches. Here one DataLoader iterates, once, the
batches of every client-round of the schedule in the order the simulator trains them:
workers start once per run, keep prefetching across client-rounds and rounds, and pin the
batches in page-locked memory on a GPU. Every batch is the one the client-round's own loader
would give (the same items, drawn from the same seeds, collated the same way: tested), so
this changes no number.

Each batch carries its tag (round, client, epoch, batch); a client-round takes the batches
of its tags in order, and a batch left untaken (a method's `on_train_batch_start` returning
-1 skips the rest of an epoch) is dropped when a later tag is asked for.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

from torch.utils.data import DataLoader, Dataset, default_collate

Tag = tuple[int, int, int, int]  # (round index, client id, local epoch, batch within the epoch)


def steps_per_epoch(num_samples: int, batch_size: int) -> int:
    """The optimizer steps of one local epoch of a client with `num_samples` images
    (`simulator.ClientBatches`' length: full batches, the last one partial)."""
    return -(-num_samples // batch_size)  # the ceiling, in integers


class ScheduleItems(Dataset):
    """Item (round, client, epoch, batch, position) of a schedule: the client-round's training
    set's item (epoch, position), as `ClientTrainSet` gives it, with its batch's tag."""

    def __init__(self, make_set: Callable[[int, int], Any]) -> None:
        self.make_set = make_set  # (round index, client id) -> the client-round's ClientTrainSet
        self._sets: dict[tuple[int, int], Any] = {}

    def __len__(self) -> int:  # pragma: no cover - read through the batch sampler only
        raise TypeError("ScheduleItems is indexed by (round, client, epoch, batch, position) keys")

    def __getitem__(self, key: tuple[int, int, int, int, int]):
        round_index, cid, epoch, batch, position = key
        dataset = self._sets.get((round_index, cid))
        if dataset is None:  # one client-round at a time in a worker: keep only the current one
            self._sets = {(round_index, cid): (dataset := self.make_set(round_index, cid))}
        image, label = dataset[(epoch, position)]
        return image, label, (round_index, cid, epoch, batch)


def collate_tagged(samples):
    """(tag, the batch as a DataLoader collates it)."""
    return samples[0][2], default_collate([(image, label) for image, label, _ in samples])


class ScheduleStream:
    """The one loader of a run: `plan` lists, in training order, each client-round's
    (round index, client id, its epochs' orders: per epoch a list of positions), chunked into
    batches of `batch_sizes[(round, client)]`."""

    def __init__(
        self,
        make_set: Callable[[int, int], Any],
        plan: Sequence[tuple[int, int, Sequence[Sequence[int]]]],
        batch_sizes: dict[tuple[int, int], int],
        num_workers: int,
        pin_memory: bool,
    ) -> None:
        batches: list[list[tuple[int, int, int, int, int]]] = []
        self.steps: dict[tuple[int, int], int] = {}
        for round_index, cid, epochs in plan:
            size = batch_sizes[round_index, cid]
            for epoch, order in enumerate(epochs):
                chunks = [order[start : start + size] for start in range(0, len(order), size)]
                self.steps[round_index, cid] = len(chunks)
                for b, chunk in enumerate(chunks):
                    batches.append([(round_index, cid, epoch, b, position) for position in chunk])
        self.ordinal: dict[Tag, int] = {tuple(batch[0][:4]): n for n, batch in enumerate(batches)}
        self.loader = DataLoader(
            ScheduleItems(make_set),
            batch_sampler=batches,
            num_workers=num_workers,
            collate_fn=collate_tagged,
            pin_memory=pin_memory,
            persistent_workers=num_workers > 0,
            prefetch_factor=4 if num_workers > 0 else None,
        )
        self._iterator: Iterator | None = None

    def planned(self, round_index: int, cid: int) -> bool:
        return (round_index, cid) in self.steps

    def take(self, tag: Tag):
        """The batch of `tag`, dropping untaken batches before it."""
        if self._iterator is None:
            self._iterator = iter(self.loader)  # the workers start here, once
        wanted = self.ordinal[tag]
        for got, batch in self._iterator:
            if got == tag:
                return batch
            if self.ordinal[got] > wanted:
                raise RuntimeError(f"the schedule's loader passed batch {tag} (at {got}): batches taken out of order")
        raise RuntimeError(f"the schedule's loader ended before batch {tag}")

    def batches(self, round_index: int, cid: int) -> "ScheduledBatches":
        return ScheduledBatches(self, round_index, cid, self.steps[round_index, cid])

    def close(self) -> None:
        """Stop the workers (the run ended, or failed)."""
        self._iterator = None
        self.loader = None


class ScheduledBatches:
    """A client-round's batches from the stream, one local epoch per iteration (what
    `simulator.ClientBatches` gives, batch for batch)."""

    def __init__(self, stream: ScheduleStream, round_index: int, cid: int, steps: int) -> None:
        self.stream, self.round_index, self.cid, self.steps = stream, round_index, cid, steps
        self._epoch = 0

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        epoch, self._epoch = self._epoch, self._epoch + 1
        for batch in range(self.steps):
            yield self.stream.take((self.round_index, self.cid, epoch, batch))
