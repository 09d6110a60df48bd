"""What `--help` lists comes from the registries: the executors of `fedbench reproduce`
(each declares its own flags) and the protocols of `--protocol`, read without torch."""

from __future__ import annotations

import argparse

import pytest

from benchmark.cli import build_parser
from benchmark.cli.args import protocol_names, run_option_help
from benchmark.config import ConfigError
from benchmark.sweeps import executors
from benchmark.sweeps.executors import EXECUTORS, executor_from_args, get_executor, register_executor


def reproduce_parser() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["reproduce"]


def test_the_protocol_names_are_the_registered_protocols():
    from benchmark.protocol_registry import available_protocols

    assert protocol_names() == tuple(available_protocols())
    assert run_option_help("protocol").startswith(" | ".join(available_protocols()) + ";")


def test_the_executor_choices_and_help_come_from_the_registry():
    assert list(EXECUTORS) == ["local", "ray", "slurm"]
    action = next(a for a in reproduce_parser()._actions if a.dest == "executor")
    assert list(action.choices) == list(EXECUTORS) and action.default == "local"
    for name, cls in EXECUTORS.items():
        assert f"{name}: {cls.summary}" in action.help
    assert get_executor("slurm").name == "slurm"


def test_an_executor_is_one_class_with_its_own_flags():
    """A new executor registered (as a file of benchmark/sweeps/executors/ would be) brings
    its --executor choice, its help and its flags, which another executor refuses."""
    before, flags = dict(EXECUTORS), dict(executors.FLAGS)
    try:

        @register_executor("test_queue")
        class QueueExecutor:
            summary = "each cell a message on a queue"
            extra = None
            waits = False

            def __init__(self, url: str | None) -> None:
                self.url = url

            @classmethod
            def add_arguments(cls, group) -> None:
                group.add_argument("--queue-url", metavar="URL", help="test_queue: the queue")

            @classmethod
            def from_args(cls, args):
                return cls(args.queue_url)

        parser = reproduce_parser()
        shown = " ".join(parser.format_help().split())
        assert (
            "test_queue: each cell a message on a queue" in shown and "--queue-url URL test_queue: the queue" in shown
        )
        args = parser.parse_args(["toy", "--executor", "test_queue", "--queue-url", "amqp://q"])
        executor = executor_from_args(args)
        assert isinstance(executor, QueueExecutor) and executor.url == "amqp://q" and executor.name == "test_queue"
        with pytest.raises(ConfigError, match="--queue-url only apply to --executor test_queue"):
            executor_from_args(parser.parse_args(["toy", "--queue-url", "amqp://q"]))
        with pytest.raises(ConfigError, match="--workers only apply to --executor local"):
            executor_from_args(parser.parse_args(["toy", "--executor", "test_queue", "--workers", "2"]))
    finally:
        EXECUTORS.clear()
        EXECUTORS.update(before)
        executors.FLAGS.clear()
        executors.FLAGS.update(flags)
