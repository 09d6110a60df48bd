"""The search `fedbench tune` runs for one method, apart from running anything: which points
to try, which one to choose, and what a reader must be told about the choice.

1. A fixed grid over every tuned hyperparameter's declared range, anchored at the paper
   default: from the default towards each end in equal steps of at most 1/POINTS_PER_DECADE
   decade (log ranges) or a quarter of the range (linear ones), both ends included, every
   value of a Choice. So no decade of a learning-rate range goes untried (the sampler of the
   previous tuner drew six values of which none lay between 0.0013 and 0.026 for any method).
2. Refinement: each further trial halves the widest gap next to the current choice along one
   numeric axis (a bisection of the smoothed curve's peak), so the neighbours of the choice
   end up close enough that a cliff beside it shows.
3. Extension: while the choice sits at an end of a learning-rate (log) range, up to
   EXTENSIONS further trials each one grid step beyond the outermost value tried on that side
   (within the hyperparameter's valid values), so a method whose best rate lies past the
   declared range gets it tried (the 2026-12-05 retune left 8 of 13 toy methods at the top of
   their ranges). The same rule for every method; a method whose choice is inside its range
   runs none.
4. The choice, with the statistics of the table (`benchmark.sweeps.statements`): a point is
   "best" only against the points it is separated from. The candidates are the best single
   point and every finished point it is not separated from (paired by tuning seed: the
   paired t-test, Holm-corrected over the comparisons, does not give ≻; or TOST shows the two
   within the 1-point margin). Among them the tie is broken by the smoother neighbourhood: the
   highest *smoothed* score. Smoothing averages each point with its neighbours (a Gaussian
   kernel of SMOOTHING grid steps), so one lucky draw next to a collapse does not win; a failed
   trial (diverged) counts as 0 there.
5. The noise: the spread of one point's score over its tuning seeds, measured on every trial
   (the median standard deviation over seeds), as the standard error of a trial's mean; two
   points differ beyond noise when their gap exceeds twice the standard error of a difference.
6. Flags: a choice at an end of the values tried, at or past its declared range (the best may
   lie beyond it: the extensions are spent or the next step is not a valid value), or next to a
   jump: within one grid step of it, a step of the curve beyond the noise and much steeper than
   its typical step (a collapse, or points apart by more than the noise for a tiny change of
   rate); or its own nearest tried neighbour scoring apart from it by more than the two points'
   spreads over seeds explain (a narrow peak: the next point already does measurably worse).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import median
from typing import Any, Mapping, Sequence

import numpy as np

from benchmark.method import Choice, LogUniform, SearchSpace
from benchmark.sweeps import statements

POINTS_PER_DECADE = 2  # log ranges: grid steps of at most half a decade
LINEAR_STEPS = 4  # linear ranges: grid steps of at most a quarter of the range
REFINEMENTS = 2  # trials after the grid, the same for every method: one on each side of the choice, typically
EXTENSIONS = 2  # at most this many trials past an end of a log range, while the choice sits at that end
SMOOTHING = 0.5  # the smoothing kernel's standard deviation, in grid steps
MIN_GAP = 1 / 8  # refinement stops splitting gaps narrower than this, in grid steps
NOISE_MULTIPLE = 2.0  # a gap beyond this many standard errors of a difference is not noise
CLIFF_RATIO = 4.0  # a jump: a step this many times steeper than the curve's median step

Params = dict[str, Any]
CHOICE_RULE = (
    "the best single point is best only against the points it is separated from (paired by tuning seed: a "
    "Holm-corrected paired t-test at 0.05 gives ≻; the table's statistics, docs/reading-a-row.md); among it and "
    f"the points it is not separated from, the tie goes to the smoother neighbourhood: the best point of the "
    f"smoothed curve (Gaussian kernel of {SMOOTHING:g} grid steps, a failed trial counting 0)"
)


@dataclass(frozen=True)
class Trial:
    """A finished trial: its hyperparameters, its score per tuning seed (None: it failed)."""

    params: Params
    per_seed: tuple[float, ...] | None

    @property
    def value(self) -> float | None:
        return None if self.per_seed is None else sum(self.per_seed) / len(self.per_seed)

    @property
    def score(self) -> float:
        """What the curve counts: a failed trial (a diverged run) scores 0."""
        return 0.0 if self.per_seed is None else self.value


def grid_values(space: SearchSpace, default: Any, points_per_decade: int = POINTS_PER_DECADE) -> list[Any]:
    """The grid of one hyperparameter: the default, then towards each end in equal steps of at
    most one grid step (1/points_per_decade decade on a log range), both ends included; a
    Choice's values in order."""
    if isinstance(space, Choice):
        return list(space.values)
    log = isinstance(space, LogUniform)
    to_axis = math.log10 if log else float
    from_axis = (lambda u: 10**u) if log else float
    step = 1 / points_per_decade if log else (space.high - space.low) / LINEAR_STEPS
    low, mid, high = to_axis(space.low), to_axis(default), to_axis(space.high)
    values = [float(default)]
    for end in (low, high):
        steps = math.ceil(abs(end - mid) / step - 1e-9)
        values += [from_axis(mid + (end - mid) * k / steps) for k in range(1, steps + 1)]
    values = sorted(values)
    values[0], values[-1] = float(space.low), float(space.high)  # exactly the declared ends
    return values


def grid(
    space: Mapping[str, SearchSpace], defaults: Params, points_per_decade: int = POINTS_PER_DECADE
) -> list[Params]:
    """Every combination of the hyperparameters' grids, the paper default first."""
    names = sorted(space)
    points: list[Params] = [{}]
    for name in names:
        values = grid_values(space[name], defaults[name], points_per_decade)
        points = [{**p, name: v} for p in points for v in values]
    first = {name: defaults[name] for name in names}
    return [first] + [p for p in points if not _same(p, first)]


def _numeric(space: Mapping[str, SearchSpace]) -> list[str]:
    return [name for name in sorted(space) if not isinstance(space[name], Choice)]


def _axis(space: SearchSpace, value: float) -> float:
    """A numeric value on its axis, in steps of the default grid (half a decade, a quarter of a
    linear range): the smoothing and the refinement measure distances in these."""
    if isinstance(space, LogUniform):
        return math.log10(value) * POINTS_PER_DECADE
    return value / ((space.high - space.low) / LINEAR_STEPS)


def _same(a: Params, b: Params) -> bool:
    return all(math.isclose(a[k], b[k], rel_tol=1e-9) if isinstance(a[k], float) else a[k] == b[k] for k in a)


def noise(trials: Sequence[Trial]) -> float:
    """The standard error of one point's score: the median over the finished trials of the
    standard deviation of its score over the tuning seeds, divided by the root of their number
    (NaN with fewer than two seeds: no noise can be measured)."""
    spreads = [_std(t.per_seed) for t in trials if t.per_seed is not None and len(t.per_seed) > 1]
    if not spreads:
        return float("nan")
    seeds = median(len(t.per_seed) for t in trials if t.per_seed is not None and len(t.per_seed) > 1)
    return median(spreads) / math.sqrt(seeds)


def jump_limit(standard_error: float) -> float:
    """The largest gap between two points' scores that noise explains."""
    return NOISE_MULTIPLE * math.sqrt(2) * standard_error


def _std(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def smoothed(space: Mapping[str, SearchSpace], trials: Sequence[Trial]) -> list[float]:
    """Each trial's score averaged with its neighbours' (Gaussian weights in grid steps along
    the numeric axes; only trials with the same Choice values count as neighbours)."""
    numeric = _numeric(space)
    coords = [{n: _axis(space[n], t.params[n]) for n in numeric} for t in trials]
    out = []
    for i, t in enumerate(trials):
        total = weight = 0.0
        for j, other in enumerate(trials):
            if any(other.params[n] != t.params[n] for n in space if n not in numeric):
                continue
            distance2 = sum((coords[i][n] - coords[j][n]) ** 2 for n in numeric)
            w = math.exp(-distance2 / (2 * SMOOTHING**2))
            total, weight = total + w * other.score, weight + w
        out.append(total / weight)
    return out


@dataclass
class Selection:
    """What the search chose, and why a reader may doubt it."""

    index: int  # into the trials
    smoothed: list[float]
    noise: float  # the standard error of one point's score
    within_noise: bool  # not separated from the best single point (`choose`)
    flags: list[str] = field(default_factory=list)


def unseparated(trials: Sequence[Trial]) -> list[int]:
    """The best single point and the finished points it is not separated from: paired by
    tuning seed, `statements.marks` (Holm over the comparisons) gives them ≈ or ?, not ≻.
    Every finished point when the seeds cannot pair (fewer than 2, or unequal counts)."""
    finished = [i for i, t in enumerate(trials) if t.per_seed is not None]
    if not finished:
        return []
    top = max(finished, key=lambda i: (trials[i].value, -i))
    others = [i for i in finished if i != top]
    lengths = {len(trials[i].per_seed) for i in finished}
    if len(lengths) > 1 or min(lengths) < 2 or not others:
        return finished
    best = np.asarray(trials[top].per_seed, dtype=float)
    marks = statements.marks([best - np.asarray(trials[i].per_seed, dtype=float) for i in others])[0]
    return sorted([top, *(i for i, mark in zip(others, marks) if mark != statements.SEPARATED)])


def choose(space: Mapping[str, SearchSpace], trials: Sequence[Trial]) -> Selection | None:
    """The best point of the smoothed curve among the best single point and the points it is
    not separated from (`unseparated`; CHOICE_RULE); ties: the earlier trial. None when no
    trial finished."""
    candidates = unseparated(trials)
    if not candidates:
        return None
    curve = smoothed(space, trials)
    se = noise(trials)
    best = max(candidates, key=lambda i: (curve[i], -i))
    chosen = Selection(best, curve, se, True)
    chosen.flags = flags(space, trials, best, se)
    return chosen


def flags(space: Mapping[str, SearchSpace], trials: Sequence[Trial], index: int, standard_error: float) -> list[str]:
    """Why the choice `index` may not be where the method does best: at an end of the values
    tried (`_edge`), or next to a jump -- along a numeric axis, a step between two neighbouring points within
    one grid step of the choice that is beyond the noise and CLIFF_RATIO times steeper than the
    curve's typical step (so a smooth peak sampled at half a decade is not a jump, a collapse
    or a three-point change between two nearly equal rates is)."""
    chosen = trials[index]
    found = []
    for name in _numeric(space):
        value = chosen.params[name]
        end = _edge(space, trials, index, name)
        if end is not None:
            tried = [trials[i].params[name] for i in _line(space, trials, index, name)]
            declared = f"[{format_value(space[name].low)}, {format_value(space[name].high)}]"
            beyond = value > space[name].high or value < space[name].low
            found.append(
                f"{name}={format_value(value)} is the {end} of the values tried, [{format_value(min(tried))}, "
                f"{format_value(max(tried))}] (declared range {declared}): the best may lie beyond it"
                if beyond
                else f"{name}={format_value(value)} is the {end} of its range {declared}: the best may lie beyond it"
            )
        cliffs = _jumps(space, trials, index, name, jump_limit(standard_error)) if math.isfinite(standard_error) else []
        found += cliffs or _steep_neighbours(space, trials, index, name)  # one account of the same step
    return found


def _pair_limit(a: Trial, b: Trial) -> float:
    """The largest gap between two trials' means that their own spreads over seeds explain."""
    errors = [_std(t.per_seed) ** 2 / len(t.per_seed) for t in (a, b)]
    return NOISE_MULTIPLE * math.sqrt(sum(errors))


def _steep_neighbours(space, trials: Sequence[Trial], index: int, name: str) -> list[str]:
    """The choice's nearest tried neighbour on either side along `name` scores apart from it by
    more than the two points' own spreads over seeds explain (or failed): the choice sits on a
    narrow peak or at a cliff's edge, where the next grid point already does measurably worse.
    Judged with the pair's own noise, not the curve's median, because a flat plateau elsewhere
    (a rate too small to move the model scores the same at every seed) says nothing of the
    spread where the method does move."""
    chosen = trials[index]
    found = []
    for other in (trials[i] for i in _neighbours(space, trials, index, name)):
        pair = [
            f"{format_value(t.params[name])} ({_score_text(t)})"
            for t in sorted((chosen, other), key=lambda t: t.params[name])
        ]
        if other.per_seed is None:
            found.append(f"next to a jump: {name} {pair[0]} to {pair[1]}, a neighbour of the choice failed")
            continue
        if len(chosen.per_seed) < 2 or len(other.per_seed) < 2:
            continue
        gap, limit = abs(chosen.value - other.value), _pair_limit(chosen, other)
        if gap > limit:
            found.append(
                f"next to a jump: {name} {pair[0]} to {pair[1]}, {gap:.2f} points between the choice and its "
                f"nearest tried neighbour where the two points' spread over seeds explains {limit:.2f}"
            )
    return found


def _jumps(space, trials: Sequence[Trial], index: int, name: str, limit: float) -> list[str]:
    line = sorted(_line(space, trials, index, name), key=lambda i: trials[i].params[name])
    at = [_axis(space[name], trials[i].params[name]) for i in line]
    here = _axis(space[name], trials[index].params[name])
    segments = [(line[k], line[k + 1], at[k + 1] - at[k]) for k in range(len(line) - 1) if at[k + 1] > at[k]]
    if not segments:
        return []
    slopes = [abs(trials[b].score - trials[a].score) / width for a, b, width in segments]
    typical = median(slopes)
    found = []
    for (a, b, width), slope in zip(segments, slopes):
        # a grid or extension step is exactly 1 on this axis, up to rounding: 1.0000000000000002 is one step
        near = min(abs(at[line.index(a)] - here), abs(at[line.index(b)] - here)) <= 1.0 + 1e-9
        gap = abs(trials[b].score - trials[a].score)
        if near and gap > limit and slope > CLIFF_RATIO * typical:
            shown = [f"{format_value(trials[i].params[name])} ({_score_text(trials[i])})" for i in (a, b)]
            found.append(
                f"next to a jump: {name} {shown[0]} to {shown[1]}, {gap:.2f} points where the noise explains "
                f"{limit:.2f} and the curve's typical step is {typical * width:.2f}"
            )
    return found


def _score_text(trial: Trial) -> str:
    return "failed" if trial.per_seed is None else f"{trial.value:.2f}"


def _line(space: Mapping[str, SearchSpace], trials: Sequence[Trial], index: int, name: str) -> list[int]:
    """The trials on the line through trial `index` along axis `name` (the others equal), itself included."""
    chosen = trials[index]
    return [
        i
        for i, t in enumerate(trials)
        if all(_same({k: t.params[k]}, {k: chosen.params[k]}) for k in space if k != name)
    ]


def _neighbours(space: Mapping[str, SearchSpace], trials: Sequence[Trial], index: int, name: str) -> list[int]:
    """The nearest trial on each side of trial `index` along axis `name`, the others equal."""
    chosen = trials[index]
    line = [i for i in _line(space, trials, index, name) if i != index]
    below = [i for i in line if trials[i].params[name] < chosen.params[name]]
    above = [i for i in line if trials[i].params[name] > chosen.params[name]]
    picked = []
    if below:
        picked.append(max(below, key=lambda i: trials[i].params[name]))
    if above:
        picked.append(min(above, key=lambda i: trials[i].params[name]))
    return picked


def _edge(space: Mapping[str, SearchSpace], trials: Sequence[Trial], index: int, name: str) -> str | None:
    """'top' ('bottom') when trial `index` holds the largest (smallest) value of `name` tried on
    its line and that value is at or past the declared end of the range; else None."""
    value, bounds = trials[index].params[name], space[name]
    tried = [trials[i].params[name] for i in _line(space, trials, index, name)]
    if value >= max(tried) and (value > bounds.high or math.isclose(value, bounds.high, rel_tol=1e-9)):
        return "top"
    if value <= min(tried) and (value < bounds.low or math.isclose(value, bounds.low, rel_tol=1e-9)):
        return "bottom"
    return None


def extension(
    space: Mapping[str, SearchSpace],
    trials: Sequence[Trial],
    valid: Mapping[str, Any] | None = None,
    points_per_decade: int = POINTS_PER_DECADE,
) -> Params | None:
    """The next point past an end of a log range: one grid step (1/points_per_decade decade)
    beyond the choice when the choice is the outermost value tried there (`_edge`). None when
    the choice is inside the values tried on every log axis, or the step would leave the
    hyperparameter's valid values (`valid[name].contains`, e.g. a learning rate's Range)."""
    chosen = choose(space, trials)
    if chosen is None:
        return None
    params = trials[chosen.index].params
    for name in _numeric(space):
        end = _edge(space, trials, chosen.index, name) if isinstance(space[name], LogUniform) else None
        if end is None:
            continue
        value = params[name] * 10 ** ((1 if end == "top" else -1) / points_per_decade)
        if valid is not None and name in valid and not valid[name].contains(value):
            continue
        return {**params, name: value}
    return None


def refinement(space: Mapping[str, SearchSpace], trials: Sequence[Trial]) -> Params | None:
    """The next point after the grid: the midpoint (on the axis's scale) of the widest gap next
    to the best smoothed point along one of its numeric axes, gaps narrower than MIN_GAP grid
    steps left alone; the next best point's gaps when the best has none left. None when no
    point has a gap to split (a space of Choices only)."""
    numeric = _numeric(space)
    if not numeric or not trials:
        return None
    curve = smoothed(space, trials)
    for index in sorted(range(len(trials)), key=lambda i: (-curve[i], i)):
        if trials[index].per_seed is None:
            continue
        options = []
        for name in numeric:
            here = _axis(space[name], trials[index].params[name])
            for neighbour in _neighbours(space, trials, index, name):
                there = _axis(space[name], trials[neighbour].params[name])
                if abs(there - here) >= 2 * MIN_GAP:
                    options.append((abs(there - here), trials[neighbour].score, name, neighbour))
        if options:
            _, _, name, neighbour = max(options, key=lambda o: (o[0], o[1]))
            a, b = trials[index].params[name], trials[neighbour].params[name]
            middle = math.sqrt(a * b) if isinstance(space[name], LogUniform) else (a + b) / 2
            return {**trials[index].params, name: middle}
    return None


def format_value(value: Any) -> str:
    """A hyperparameter's value as the reports show it (4 significant digits)."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)
