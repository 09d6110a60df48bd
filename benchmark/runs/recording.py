"""A run's metric rows (metrics.csv) as its engine's rounds come, and the evaluated rounds it
chooses the reported one from (`benchmark.evaluation.round_selection`)."""

from __future__ import annotations

from benchmark.evaluation.client_metrics import evaluate_clients
from benchmark.evaluation.metrics import extra_metrics, protocol_metrics, summarize
from benchmark.evaluation.round_selection import RoundSelection
from benchmark.federation.round_loop import FederationResult, PerClient, RoundHooks, RoundLog
from benchmark.memory import PeakMemory
from benchmark.method import State
from benchmark.runs.preparation import PreparedRun, autocast_context
from benchmark.runs.results import ALL_CLIENTS, MetricRow


class RunRecord:
    """The rows of one run, in the order metrics.csv lists them: each round's losses, lrs and
    bytes, each evaluated round's per-client and summary metrics, the fine-tuning losses, the
    rounds each client trained. `rows` may start with a resumed run's."""

    def __init__(self, run: PreparedRun, tracker, progress: bool, memory: PeakMemory, rows: list[MetricRow]) -> None:
        self.run, self.tracker, self.progress, self.memory = run, tracker, progress, memory
        self.rows = rows
        self.evaluator = run.evaluator()  # one for every evaluated round: it memoizes by state
        self.selection = RoundSelection(run.config.select_round)

    def hooks(self, eval_rounds: frozenset[int], on_checkpoint=None) -> RoundHooks:
        """The run's hooks for an engine: its rounds' rows, its evaluated rounds (`eval_rounds`)
        scored here or by the engine's clients, and `on_checkpoint` (the round loop's state
        after every round: `checkpoints.RoundKeeper.on_checkpoint`, or None)."""
        return RoundHooks(
            on_round_end=self.round_end,
            on_states=self.states,
            on_scores=self.scores,
            eval_rounds=eval_rounds,
            memory=self.memory,
            progress=self.progress,
            on_checkpoint=on_checkpoint,
        )

    def round_end(self, log: RoundLog) -> None:
        rows = self.rows
        for cid, loss in log.train_loss.items():
            rows.append(MetricRow(log.round, cid, "train_loss", loss))
        for cid, lr in log.lr.items():  # the mean lr of each client-round's steps (`round_lr`)
            rows.append(MetricRow(log.round, cid, "lr", lr))
        rows.append(MetricRow(log.round, ALL_CLIENTS, "bytes_up", log.bytes_up))
        rows.append(MetricRow(log.round, ALL_CLIENTS, "bytes_down", log.bytes_down))
        if self.tracker is not None:
            self.tracker.log_round(log)

    def states(self, round_number: int, states: dict[int, State]) -> tuple:
        """Score every client's state of an evaluated round here, record and offer it."""
        run = self.run
        with self.memory.phase("evaluation"), autocast_context(run.device, run.precision):
            per_client, _ = evaluate_clients(
                self.evaluator, run.protocol, run.dataset, run.partition, states, self.progress
            )
        return self.scores(round_number, per_client, states)

    def scores(self, round_number: int, per_client: PerClient, states: dict[int, State] | None = None) -> tuple:
        """Record an evaluated round's per-client metrics and the protocol's summary of them,
        and offer the round (its `states`: none where they stay on the engine's clients)."""
        protocol, partition = self.run.protocol, self.run.partition
        extras = list(extra_metrics(self.run.config.metrics))  # `--metrics`: after the protocol's own
        summary_metrics = summarize(protocol, per_client, partition, extras)
        details = protocol.details(protocol_metrics(per_client, extras), partition)
        for cid, metrics in per_client.items():
            self.rows.extend(MetricRow(round_number, cid, m, v) for m, v in metrics.items())
        extra = {**summary_metrics, **details}
        self.rows.extend(MetricRow(round_number, ALL_CLIENTS, m, v) for m, v in extra.items())
        if self.tracker is not None:
            self.tracker.log_evaluation(round_number, summary_metrics)
        evaluation = (per_client, summary_metrics, details)
        self.selection.offer(round_number, states or {}, evaluation)
        return evaluation

    def finetune_losses(self, round_number: int, losses: dict[int, float]) -> None:
        self.rows.extend(MetricRow(round_number, cid, "finetune_loss", loss) for cid, loss in losses.items())

    def rounds_trained(self, round_number: int, federation: FederationResult) -> None:
        # 0 flags a client that never trained: evaluated with the final download alone.
        trained = federation.rounds_trained.items()
        self.rows.extend(MetricRow(round_number, cid, "rounds_trained", n) for cid, n in trained)
