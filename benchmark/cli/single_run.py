"""One cell run from the command line (`fedbench run`, `fedbench flower`): in its run
folder under its lock, tracked, its table printed."""

from __future__ import annotations

import sys
from pathlib import Path


def run_header(config, command: str = "fedbench run") -> str:
    """The first line of a run: the command, what runs (its kind: `promptfl (local)`), on what,
    with which backbone and weights."""
    from benchmark.runs.reporting import config_label

    weights = "none (random initialization)" if str(config.pretrained).lower() in ("none", "") else config.pretrained
    return (
        f"{command}: {config_label(config)} on {config.dataset} ({config.protocol}, {config.shots}-shot, seed "
        f"{config.seed}), backbone {config.backbone}, weights {weights}"
    )


def toy_backbone_on_real_data(config) -> str:
    """A warning when one of the suite's small CLIPs (made for the toy world and the tests)
    runs on a real dataset: the default backbone is the toy CLIP, so forgetting --backbone
    would otherwise give numbers that look like a real run's."""
    from benchmark.backbone_weights import suite_backbones
    from data.catalog import dataset_info

    if config.backbone not in suite_backbones():
        return ""
    real = [d for d in config.datasets + config.test_datasets if not dataset_info(d).generated]
    if not real:
        return ""
    presets = presets_with(real[0], config.protocol)
    preset = (
        f" (or run a preset that holds it: `fedbench reproduce {presets[0]} --datasets {real[0]}`)" if presets else ""
    )
    return (
        f"backbone {config.backbone} is the suite's small CLIP (for the toy world and tests), but {', '.join(real)} "
        f"is real data: its numbers say nothing about CLIP. For a paper cell pass --backbone ViT-B-16-quickgelu "
        f"--pretrained openai{preset}."
    )


def presets_with(dataset: str, protocol: str) -> list[str]:
    """The presets whose table has `dataset` under `protocol` (those under another protocol after
    them): the one a warning points to must accept `--datasets dataset` (base2novel has no pacs)."""
    from benchmark.config import RunConfig
    from benchmark.sweeps.presets import available_presets, load_preset

    found = []
    for name in available_presets():
        try:
            preset = load_preset(name)
        except Exception:  # a preset that does not load is reported by `fedbench presets`, not here
            continue
        if any(d.get("name") == dataset for d in preset.datasets):
            # the protocol's own preset first (base2novel before the backbone ablation), then by name
            found.append((preset.run.get("protocol", RunConfig.protocol) != protocol, name != protocol, name))
    return [name for *_, name in sorted(found)]


def run_config(config, tags: tuple[str, ...], engine=None, force: bool = False) -> int:
    """Run one cell in its run folder under its lock, tracked, and print its table.
    `engine`: None for the in-process simulator, or another one (`benchmark.runs.flower`).
    A cell whose finished run folder exists is not run again (as `fedbench reproduce`
    skips it): its table is printed from the folder; `force` runs it again."""
    from benchmark.errors import UserError
    from benchmark.runs.identity import prepare_data, prepare_weights, run_name
    from benchmark.runs.locks import cell_lock
    from benchmark.runs.reporting import config_label, format_summary
    from benchmark.runs.results import is_complete, read_summary, read_timing, record_failure
    from benchmark.runs.runner import run_experiment
    from benchmark.runs.tracking import Tracker

    config = _checked_and_announced(config, tags[0])
    prepare_weights(config.pretrained)  # the run's name (lock, W&B) hashes the weights it loads
    prepare_data(config)  # and the split files it reads
    run_dir = Path(config.out) / run_name(config)
    with cell_lock(run_dir):
        if not force and is_complete(run_dir):  # checked under the lock: another process may just have finished it
            print(format_summary(read_summary(run_dir), read_timing(run_dir), config_label(config)))
            print(
                f"skipped: {run_dir} holds this cell's finished run (the same settings, code and weights); "
                "its table is above. Pass --force to run it again (it replaces the folder)."
            )
            return 0
        with Tracker.for_run(config, tags=tags, deferred=True) as tracker:
            try:
                result = run_experiment(config, tracker=tracker, engine=engine)
            except Exception as exc:  # recorded beside the folder: `fedbench runs` lists the cell as failed
                # Not a run refused while it was built, nor one refused for a setting or input the user
                # fixes (a UserError, exit 2): a refused command leaves the runs folder as it was.
                if tracker.started and not isinstance(exc, UserError):
                    record_failure(run_dir, f"{exc.__class__.__name__}: {exc}", config.to_dict())
                raise
    from benchmark.sweeps.compare import run_curves

    run_curves(result.run_dir)  # accuracy by round, drawn as `reproduce` draws a table's
    print(format_summary(result.summary, result.timing, config_label(config)))
    print(f"run folder: {result.run_dir}")
    return 0


def _checked_and_announced(config, tag: str):
    """`config` checked on this machine before W&B starts or a backbone is built, with the
    shots its data give; its header, warnings and notes printed."""
    from benchmark.backbone_weights import check_weights_reachable
    from benchmark.runs.prechecks import check_device, validate_run
    from benchmark.runs.readiness import fit_shots_to_data
    from benchmark.runs.results import check_output_location

    notes = validate_run(config)  # before W&B starts or a backbone is built
    check_device(config.device)  # this machine runs it
    check_weights_reachable(config.backbone, config.pretrained)  # offline: say how to pass a file, now
    check_output_location(Path(config.out))
    # Named by the shots its data give, not those asked for (a load writes DomainBed's splits,
    # as prepare_data would: after the output check, so a refused run writes nothing).
    config, data_notes = fit_shots_to_data(config)
    print(run_header(config, tag))
    warning = toy_backbone_on_real_data(config)
    for line in ([warning] if warning else []) + data_notes:
        print(f"fedbench: warning: {line}", file=sys.stderr)
    for note in notes:
        print(f"note: {note}")
    return config
