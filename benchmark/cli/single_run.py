"""One cell run from the command line (`fedbench run`, `fedbench flower`): in its run
folder under its lock, tracked, its table printed."""

from __future__ import annotations

from pathlib import Path


def run_config(config, tags: tuple[str, ...], engine=None) -> int:
    """Run one cell in its run folder under its lock, tracked, and print its table.
    `engine`: None for the in-process simulator, or another one (`benchmark.runs.flower`)."""
    from benchmark.runs.identity import prepare_data, prepare_weights, run_name
    from benchmark.runs.locks import cell_lock
    from benchmark.runs.prechecks import validate_run
    from benchmark.runs.reporting import format_summary
    from benchmark.runs.results import check_output_location
    from benchmark.runs.runner import run_experiment
    from benchmark.runs.tracking import Tracker

    for note in validate_run(config):  # before W&B starts or a backbone is built
        print(f"note: {note}")
    check_output_location(Path(config.out))
    prepare_weights(config.pretrained)  # the run's name (lock, W&B) hashes the weights it loads
    prepare_data(config)  # and the split files it reads
    with cell_lock(Path(config.out) / run_name(config)), Tracker.for_run(config, tags=tags) as tracker:
        result = run_experiment(config, tracker=tracker, engine=engine)
    print(format_summary(result.summary, result.timing))
    print(f"run folder: {result.run_dir}")
    return 0
