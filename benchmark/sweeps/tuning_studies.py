"""Where `fedbench tune`'s studies live and what they found: the Optuna storage, a study
opened or resumed under its identity, the finished trials read back, and the outputs.

Storage: one Optuna study per method label in `<results>/tuning.db` (SQLite), so a killed
run resumes without repeating finished trials and the trials can be inspected with Optuna's
own tools. Each study records what its trials depend on (search space, grid density,
refinements, seeds, resolved configs, and the identity of the cells they run: the method's
source, the framework code, the weights and the data code, as `benchmark.runs.identity`
names a cell); resuming it under anything else is an error that says what changed, never a
silent mix of trials scored by two versions of a method.

Outputs, rewritten after every trial: `<results>/tuning.csv` (every trial: method, trial,
phase, state, hyperparameters, validation metric (the mean over seeds), its value at each
seed (`value_seed<S>`), the smoothed curve, chosen, every metric's mean and per-seed values),
`<results>/tuning.md` and `tuning.png` (each method's curve with its noise, choice and flags)
and `<results>/tuned.yaml` (the chosen values of every method whose budget is spent, with
their flags and the command that produced them), which `fedbench reproduce TABLE --tuned`
applies.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import yaml

from benchmark.config import ConfigError, typed_options
from benchmark.files import atomic_write, file_lock
from benchmark.registry import get_method
from benchmark.runs.results import code_version, is_complete, read_summary
from benchmark.sweeps import search
from benchmark.sweeps.presets import MethodVariant
from benchmark.sweeps.tables import run_dir
from benchmark.sweeps.tuning_plan import CODE_PARTS, TuningPlan, search_trials
from benchmark.sweeps.tuning_report import write_report

TUNING_DB = "tuning.db"
TUNING_CSV = "tuning.csv"
TUNED_YAML = "tuned.yaml"
TUNING_MD = "tuning.md"
TUNING_PNG = "tuning.png"


def storage(plan: TuningPlan):
    import optuna

    db = (plan.results_dir / TUNING_DB).resolve()
    db.parent.mkdir(parents=True, exist_ok=True)
    # Two `fedbench tune` processes opening a new file at once both create its schema, and one
    # fails ("table alembic_version already exists"): create it under a lock beside the file.
    with file_lock(db.with_name(f"{TUNING_DB}.lock")):
        # processes tuning other methods of the table write to the same file: wait for its lock
        return optuna.storages.RDBStorage(f"sqlite:///{db}", engine_kwargs={"connect_args": {"timeout": 120}})


def open_study(plan: TuningPlan, variant: MethodVariant):
    import optuna

    study = optuna.create_study(
        study_name=variant.label, storage=storage(plan), direction="maximize", load_if_exists=True
    )
    identity = json.dumps(plan.identity(variant), sort_keys=True, default=str)
    recorded = study.user_attrs.get("identity")
    if recorded is None:
        if study.trials:
            raise ConfigError(
                f"{plan.results_dir / TUNING_DB}: study {variant.label!r} has trials but no identity; "
                "it was not written by `fedbench tune`. Use another --results folder."
            )
        study.set_user_attr("identity", identity)
        study.set_user_attr("method", variant.method)
    elif recorded != identity:
        old, new = json.loads(recorded), json.loads(identity)
        changed = _changed_keys(old, new)
        code = _changed_code(old, new)
        why = (
            f"{' and '.join(code)} changed since its trials ran, so they scored another version of the method than "
            "the next trials would, and one study must not mix them"
            if code
            else "its trials cannot be continued with these"
        )
        raise ConfigError(
            f"{plan.results_dir / TUNING_DB} holds a search for {variant.label!r} made under other settings "
            f"(differing: {', '.join(changed)}): {why}. Start a new study: pass another --results folder (and --out "
            f"for its trial runs), or delete that file, {TUNING_CSV} and {TUNED_YAML} there to start over."
        )
    return study


def _changed_code(old: dict, new: dict) -> list[str]:
    """What changed of the cells' code identity, in words (a study recorded before studies
    were keyed on it has none: everything counts as changed)."""
    before, now = old.get("code"), new.get("code", {})
    if before is None:
        return ["the code its cells run (the study predates code-keyed studies)"]
    return [CODE_PARTS[p] for p in CODE_PARTS if before.get(p) != now.get(p)]


def _changed_keys(old: dict, new: dict) -> list[str]:
    changed = [k for k in sorted(set(old) | set(new)) if k not in ("configs", "code") and old.get(k) != new.get(k)]
    changed += [what for what in _changed_code(old, new) if not what.startswith("the code its")]
    if "code" not in old:
        changed.append("code identity")
    old_cfgs, new_cfgs = old.get("configs", []), new.get("configs", [])
    if len(old_cfgs) != len(new_cfgs):
        changed.append("datasets/grid")
    else:
        for a, b in zip(old_cfgs, new_cfgs):
            changed += [f"run option {k}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    return list(dict.fromkeys(changed)) or ["configs"]


def finished_trials(study) -> list:
    """Trials that count against the budget: completed ones and ones that failed with an
    error (a trial that errors is a spent trial, as it would be for its authors)."""
    from optuna.trial import TrialState

    return [
        t
        for t in study.get_trials(deepcopy=False)
        if t.state == TrialState.COMPLETE or (t.state == TrialState.FAIL and "error" in t.user_attrs)
    ]


def fail_interrupted(study, report: Callable[[str], None]) -> None:
    """Trials left RUNNING by a killed process (we hold the table's lock, so no live process
    owns them) become FAIL without an error: they do not count and are run again. So do
    trials left WAITING (killed between queueing a point and starting it): Optuna tells only
    a started trial, so each is started first; left in the queue, the next `ask` would take
    its parameters in place of the point the search asks for then."""
    from optuna.trial import TrialState

    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)
        report(f"{study.study_name}: trial {trial.number} was interrupted; it will be run again")
    for _ in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        trial = study.ask()  # the oldest queued trial
        study.tell(trial, state=TrialState.FAIL)
        report(f"{study.study_name}: trial {trial.number} was queued but not started; it will be run again")


def table_studies(plan: TuningPlan, report: Callable[[str], None] = print) -> dict:
    """The studies in tuning.db of every tunable method of the table (whichever process ran
    them) that were made under this plan's settings; others are reported and left out."""
    import optuna

    opened = storage(plan)
    names = set(optuna.get_all_study_names(opened))
    studies, other = {}, []
    for variant in plan.table_variants:
        if variant.label not in names or not get_method(variant.method).tunable:
            continue
        study = optuna.load_study(study_name=variant.label, storage=opened)
        identity = json.dumps(plan.identity(variant), sort_keys=True, default=str)
        if study.user_attrs.get("identity") != identity:
            other.append(variant.label)
            continue
        studies[variant.label] = study
    if other:  # one line, whatever their number (a table of 13 methods tuned under other settings)
        report(
            f"{len(other)} {'study' if len(other) == 1 else 'studies'} in {plan.results_dir / TUNING_DB} ran under "
            f"other settings ({', '.join(other)}); left out of the outputs"
        )
    return studies


@dataclass
class MethodSearch:
    """One method's finished search as the outputs show it: its trials (finished ones, in
    order), the search's reading of them, the chosen trial and whether the budget is spent."""

    label: str
    trials: list  # optuna FrozenTrials, finished
    points: list[search.Trial]
    selection: search.Selection | None
    budget: int
    done: bool

    @property
    def chosen(self):
        return None if self.selection is None else self.trials[self.selection.index]


def method_searches(plan: TuningPlan, studies: dict) -> dict[str, MethodSearch]:
    variants = {v.label: v for v in plan.table_variants}
    found = {}
    for label, study in studies.items():
        variant = variants[label]
        finished = finished_trials(study)
        points = search_trials(plan, finished)
        space = plan.space(variant)
        budget = plan.budget(variant)
        done = len(finished) >= budget or plan.next_point(variant, finished) is None
        found[label] = MethodSearch(label, finished, points, search.choose(space, points), budget, done)
    return found


def trials_frame(plan: TuningPlan, studies: dict) -> pd.DataFrame:
    """Every trial of every study, one row each: method, trial, phase (grid, refinement or extension),
    state, hyperparameters, the selection metric and value (the mean over the tuning seeds),
    `value_seed<S>` (its value at seed S: the mean over that seed's cells), `smoothed` (the
    curve the choice is read from), chosen, and every metric of the protocol on validation,
    `val_<metric>` over all the trial's runs and `val_<metric>_seed<S>` per seed (read from
    its run folders: what a choice traded, e.g. Base for Novel, and how much it moved between
    seeds)."""
    variants = {v.label: v for v in plan.table_variants}
    searches = method_searches(plan, studies)
    rows = []
    for label, study in studies.items():
        found = searches[label]
        curve = {t.number: v for t, v in zip(found.trials, found.selection.smoothed)} if found.selection else {}
        chosen = found.chosen
        for t in study.get_trials(deepcopy=False):
            interrupted = t.state.name == "FAIL" and "error" not in t.user_attrs
            metrics = _validation_metrics(plan, variants[label], t.params) if t.state.name == "COMPLETE" else {}
            per_seed = t.user_attrs.get("per_seed", {}) if t.state.name == "COMPLETE" else {}
            rows.append(
                {
                    "method": label,
                    "trial": t.number,
                    "phase": t.user_attrs.get("phase", ""),
                    "state": "INTERRUPTED" if interrupted else t.state.name,
                    **{f"param_{k}": v for k, v in sorted(t.params.items())},
                    "metric": f"{plan.headline} (validation)",
                    "value": t.value,
                    **{f"value_seed{s}": per_seed.get(str(s)) for s in plan.seeds},
                    "smoothed": None if t.number not in curve else round(curve[t.number], 4),
                    "chosen": chosen is not None and t.number == chosen.number,
                    **{f"val_{k}": v for k, v in metrics.items()},
                    "error": t.user_attrs.get("error", ""),
                }
            )
    return pd.DataFrame(rows)


def _validation_metrics(plan: TuningPlan, variant: MethodVariant, params: dict[str, Any]) -> dict[str, float]:
    """'<metric>': the mean over the trial's finished runs, '<metric>_seed<S>': over seed S's."""
    runs = [(c.config.seed, read_summary(run_dir(c))) for c in plan.cells(variant, params) if is_complete(run_dir(c))]
    if not runs:
        return {}
    names = list(runs[0][1]["metrics"])

    def mean(metric: str, summaries) -> float:
        return round(sum(float(s["metrics"][metric]) for s in summaries) / len(summaries), 4)

    found = {m: mean(m, [s for _, s in runs]) for m in names}
    for seed in plan.seeds:
        at_seed = [s for run_seed, s in runs if run_seed == seed]
        if at_seed:
            found.update({f"{m}_seed{seed}": mean(m, at_seed) for m in names})
    return found


def write_outputs(plan: TuningPlan, report: Callable[[str], None] = print) -> dict[str, Any]:
    """tuning.csv, tuning.md, tuning.png and tuned.yaml from every study of the table; a
    method's values enter tuned.yaml once its budget is spent."""
    studies = table_studies(plan, report)
    frame = trials_frame(plan, studies)
    atomic_write(plan.results_dir / TUNING_CSV, frame.to_csv(index=False))
    searches = method_searches(plan, studies)
    values, validation, flags, pending = {}, {}, {}, []
    for variant in plan.table_variants:
        if not get_method(variant.method).tunable:
            continue
        found = searches.get(variant.label)
        if found is None or not found.done or found.chosen is None:
            pending.append(variant.label)
            continue
        chosen = found.chosen
        values[variant.label] = dict(sorted(chosen.params.items()))
        paper = found.trials[0] if found.trials and found.trials[0].state.name == "COMPLETE" else None
        best_point = max((t.value for t in found.trials if t.state.name == "COMPLETE"), default=None)
        se = found.selection.noise
        validation[variant.label] = {
            "tuned": round(chosen.value, 4),
            "trial": chosen.number,
            "paper_default": None if paper is None else round(paper.value, 4),
            "best_point": None if best_point is None else round(best_point, 4),
            "noise": None if not math.isfinite(se) else round(se, 4),
        }
        if found.selection.flags:
            flags[variant.label] = "; ".join(found.selection.flags)
    tuned = {
        "table": plan.preset.name,
        "command": plan.command,
        "code": code_version(),
        "selection": {
            "metric": plan.headline,
            "split": "validation",
            "budget": plan.budget_text,
            "points_per_decade": plan.points_per_decade,
            "refinements": plan.refinements,
            "extensions": plan.extensions,
            "trials_per_method": {v.label: plan.budget(v) for v in plan.variants},
            "choice": search.CHOICE_RULE,
            "seeds": list(plan.seeds),
            "objective": "mean over the seeds of the mean over the (dataset x grid) cells",
            "run_options": recorded_run_options(plan.overrides),
        },
        "values": values,
        "validation": validation,
    }
    if flags:
        tuned["flags"] = flags
    if pending:
        tuned["unfinished"] = pending
    header = "# written by `fedbench tune`; applied by `fedbench reproduce TABLE --tuned`\n"
    atomic_write(plan.results_dir / TUNED_YAML, header + yaml.safe_dump(tuned, sort_keys=False))
    write_report(plan, searches, plan.results_dir / TUNING_MD, plan.results_dir / TUNING_PNG)
    return tuned


# Options that say where a run reads and writes, not what it computes: no part of the schedule
# the values were chosen under.
NOT_SCHEDULE = ("out", "data_root", "device", "wandb", "wandb_project", "wandb_entity", "wandb_group", "wandb_tags")


def recorded_run_options(overrides: dict[str, Any]) -> dict[str, Any]:
    """The run options a search changed from its table's (its `--set`), typed as a run reads them."""
    return typed_options({k: v for k, v in overrides.items() if k not in NOT_SCHEDULE})


def check_run_options(path: Path, table: dict[str, Any], overrides: dict[str, Any], accept: bool) -> str | None:
    """Whether the values in tuned.yaml `path` were chosen under the run options this table runs
    with (`overrides`, over the table's `table` run options): a ConfigError when not, unless
    `accept`, then the warning to print. A record written before options were typed holds text
    ('1'): read as a run reads it."""
    data = yaml.safe_load(Path(path).read_text()) or {}
    chosen_under = recorded_run_options((data.get("selection") or {}).get("run_options") or {})
    now = recorded_run_options(overrides)
    base = typed_options({k: v for k, v in table.items() if not isinstance(v, dict)})

    def value(options: dict[str, Any], key: str) -> Any:
        return options.get(key, base.get(key))

    differing = [k for k in sorted(set(chosen_under) | set(now)) if value(chosen_under, k) != value(now, k)]
    if not differing:
        return None
    tuned = ", ".join(f"{k}={value(chosen_under, k)}" for k in differing)
    here = ", ".join(f"{k}={value(now, k)}" for k in differing)
    what = (
        f"the values in {path} were chosen under {tuned}; this table runs with {here}, and values chosen under "
        "one schedule need not be the best of another"
    )
    if accept:
        return f"WARNING: {what}. Applying them anyway (--accept-tuned-options): the table's tuned rows are not tuned for this schedule"
    raise ConfigError(
        f"{what}. Tune under this schedule (`fedbench tune` with the same --set), reproduce under the tuning's "
        f"(--set {' '.join(f'{k}={value(chosen_under, k)}' for k in differing)}), or pass --accept-tuned-options "
        "to apply them anyway"
    )


def load_tuned_notes(path: Path) -> tuple[dict[str, str], str]:
    """What a tuned.yaml says about its values beside them: the flags (label -> why the search
    doubts its choice) and the budget every method got, in words."""
    data = (yaml.safe_load(Path(path).read_text()) or {}) if Path(path).is_file() else {}
    flags = {str(k): str(v) for k, v in (data.get("flags") or {}).items()}
    return flags, str((data.get("selection") or {}).get("budget", ""))


def load_tuned(path: Path) -> dict[str, dict[str, Any]]:
    """The chosen values of a tuned.yaml (label -> hyperparameters), with a clear error."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"no tuned values at {path}: run `fedbench tune` on this table first (it writes {TUNED_YAML})"
        )
    data = yaml.safe_load(path.read_text()) or {}
    values = data.get("values")
    if not isinstance(values, dict):
        raise ConfigError(
            f"{path} has no 'values:' mapping of method -> hyperparameters; was it written by `fedbench tune`?"
        )
    return {str(k): dict(v) for k, v in values.items()}
