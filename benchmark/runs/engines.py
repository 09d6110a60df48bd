"""The engines a run's federation runs on, behind one interface (`Engine.train`: run the
plan of the run's federation kind, return the rounds and the states to score):

- `SimulatorEngine`: in this process (`fedbench run`), the federated simulator, with round
  checkpoints and `--finetune-epochs`;
- `SavedRunEngine`: no training, the saved clients of a finished run (`fedbench evaluate`);
- `benchmark.runs.flower.FlowerEngine`: on Flower's nodes (`fedbench flower`, `flwr run`),
  where the clients' states stay: its nodes score them and it returns their scores.

The runner (`benchmark.runs.runner`) does everything else the same way for all three: the
metric rows, the evaluation of the states an engine returns, the summary and the run folder.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from benchmark.config import RunConfig
from benchmark.federation.round_loop import FederationResult, PerClient, RoundHooks
from benchmark.method import State
from benchmark.runs.clients_file import load_clients
from benchmark.runs.preparation import PreparedRun


@dataclass
class Trained:
    """What an engine's rounds left: the federation (rounds, bytes, every partition client's
    rounds trained) and the final round's states to score per partition client, or ({}) the
    scores its clients gave them where the states stay there."""

    federation: FederationResult
    states: dict[int, State]
    scores: PerClient | None = None
    finetune_losses: dict[int, float] = field(default_factory=dict)  # `--finetune-epochs`: each client's last loss


class Engine(Protocol):
    """Where a run's federation trains: `check` refuses what of a config it cannot run, `train`
    runs the plan of the run's federation kind (`run.server`), telling `hooks` of every round
    (`benchmark.federation.round_loop.RoundHooks`, the round loop's own), and returns what the
    rounds left (`Trained`)."""

    checkpoints: bool  # writes round checkpoints and resumes from them
    trains_here: bool  # trains in this process (the run prepares its training inputs here)

    def check(self, config: RunConfig) -> None:
        """Raise a ConfigError for what of `config` this engine cannot run, before anything loads."""

    def train(self, run: PreparedRun, hooks: RoundHooks, resume: Any = None) -> Trained: ...


class SimulatorEngine:
    """The federation in this process: the run's kind of server over its plan, resumed from a
    round checkpoint where there is one; then `--finetune-epochs`, each client on its own data."""

    checkpoints = True
    trains_here = True

    def check(self, config: RunConfig) -> None:
        pass  # runs every config

    def train(self, run: PreparedRun, hooks: RoundHooks, resume: Any = None) -> Trained:
        clients, server = run.partition.clients, run.server
        # The run's hooks, an evaluated round's states as the partition's clients are scored.
        scored_hooks = dataclasses.replace(
            hooks, on_states=lambda number, states: hooks.on_states(number, server.scored_states(states, clients))
        )
        simulator = run.simulator(hooks.progress, hooks=scored_hooks)
        with hooks.memory.phase("training"):
            federation = simulator.run(resume.federation if resume is not None else None)
        federation.rounds_trained = server.rounds_trained_of(federation.rounds_trained, clients)
        scored, losses = server.scored_states(federation.client_states, clients), {}
        if run.config.finetune_epochs:  # the federation's last round stays as it is; the scored states move
            with hooks.memory.phase("training"):
                scored, losses = run.finetuner().finetune(scored, run.config.finetune_epochs)
        return Trained(federation, scored, finetune_losses=losses)


class SavedRunEngine:
    """No training: the saved clients of the finished run in `folder` (`fedbench evaluate`)."""

    checkpoints = False
    trains_here = False

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)

    def check(self, config: RunConfig) -> None:
        pass  # `fedbench evaluate` sets the config it runs

    def train(self, run: PreparedRun, hooks: RoundHooks, resume: Any = None) -> Trained:
        states = load_clients(self.folder, run.partition, run.method)
        return Trained(FederationResult(states), states)


def engine_for(config: RunConfig, engine: Engine | None) -> Engine:
    """The engine a run of `config` runs on: `engine` (checked against the config), else the
    saved run it evaluates, else the simulator."""
    if engine is None:
        engine = SavedRunEngine(config.evaluate_from) if config.evaluate_from else SimulatorEngine()
    engine.check(config)
    return engine
