"""Which round's states a run reports: the final round's (the suite's rule), or, as the official
pFedMMA code does, the round whose mean Local accuracy on the evaluated split was best
(run option `select_round = best_local_test`). The second selects on the data it reports:
tables mark such rows "selected on test" and never rank them against final-round rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchmark.config import ConfigError, RunConfig

SELECTION_METRIC = "Local"  # what the official code compares between rounds


def check_round_selection(config: RunConfig, metrics: tuple[str, ...]) -> None:
    """A run that selects its round must evaluate every round of one federation, by Local."""
    if config.select_round == "final":
        return
    if SELECTION_METRIC not in metrics:
        raise ConfigError(
            f"select_round = {config.select_round} picks the round with the best mean {SELECTION_METRIC}, which "
            f"protocol {config.protocol} does not report (it reports {', '.join(metrics)}); use select_round = final"
        )
    if config.finetune_epochs or config.evaluate_from:
        raise ConfigError(
            f"select_round = {config.select_round} selects among the federation's rounds; it cannot be combined with "
            "--finetune-epochs or with evaluating a saved run (use select_round = final)"
        )


@dataclass
class EvaluatedRound:
    round: int
    states: dict[int, Any]  # the scored clients' states of that round
    evaluation: tuple  # (per_client, summary_metrics, details) as the runner records them


class RoundSelection:
    """Offered every evaluated round in order; `chosen` is the round the run reports."""

    def __init__(self, rule: str) -> None:
        self.rule = rule
        self.best: EvaluatedRound | None = None
        self.last: EvaluatedRound | None = None

    def offer(self, round_number: int, states: dict[int, Any], evaluation: tuple) -> None:
        offered = EvaluatedRound(round_number, dict(states), evaluation)
        self.last = offered
        # strictly better: ties keep the earlier round, as the official code's `>` does
        if self.rule == "best_local_test" and (self.best is None or _local(evaluation) > _local(self.best.evaluation)):
            self.best = offered

    @property
    def chosen(self) -> EvaluatedRound:
        return self.best if self.rule == "best_local_test" else self.last


def _local(evaluation: tuple) -> float:
    return float(evaluation[1][SELECTION_METRIC])
