"""benchmark.sweeps.search: the grid covers each range, refinement bisects around the smoothed
best, the choice stays within the noise of the best point, and the flags fire where a reader
must doubt a choice (a range end, a cliff beside it) and not on a smooth curve."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmark.hyperparameters import Range
from benchmark.method import Choice, LogUniform, Uniform
from benchmark.registry import available_methods, get_method, hyperparameters
from benchmark.sweeps import search, statements


def decades_between(values: list[float]) -> list[float]:
    return [math.log10(b / a) for a, b in zip(values, values[1:])]


@pytest.mark.parametrize("points_per_decade", [2, 3])
def test_the_grid_covers_a_constructed_range_at_the_density_asked(points_per_decade):
    space = LogUniform(1e-5, 3e-1)  # 4.5 decades, the default off-centre
    values = search.grid_values(space, 2e-3, points_per_decade)
    assert values[0] == 1e-5 and values[-1] == 3e-1  # both ends, exactly
    assert 2e-3 in values  # the paper default itself
    assert values == sorted(values)
    assert max(decades_between(values)) <= 1 / points_per_decade + 1e-9
    assert len(values) >= points_per_decade * math.log10(3e-1 / 1e-5)


def test_every_builtin_range_gets_at_least_two_points_a_decade():
    for name in available_methods():
        method = get_method(name)
        defaults = {h.name: h.default for h in hyperparameters(method)}
        for key, space in method.tunable.items():
            values = search.grid_values(space, defaults[key])
            assert values[0] == space.low and values[-1] == space.high, name
            assert max(decades_between(values)) <= 0.5 + 1e-9, name


def test_linear_and_choice_axes_and_their_product():
    space = {"alpha": Uniform(0.0, 1.0), "lr": LogUniform(1e-3, 1e-1), "kind": Choice(("a", "b"))}
    points = search.grid(space, {"alpha": 0.3, "lr": 1e-2, "kind": "b"})
    alphas = sorted({p["alpha"] for p in points})
    assert alphas[0] == 0.0 and alphas[-1] == 1.0 and 0.3 in alphas and max(np.diff(alphas)) <= 0.25 + 1e-9
    assert {p["kind"] for p in points} == {"a", "b"}
    assert points[0] == {"alpha": 0.3, "kind": "b", "lr": 1e-2}  # the paper default first
    assert len(points) == len({tuple(sorted(p.items())) for p in points})  # no point twice


def run_search(
    curve, space, default, seeds=(0.5, -0.5, 0.3, -0.3), refinements=search.REFINEMENTS, extensions=0, valid=None
):
    """The search on a known curve, every point scored at four 'seeds' (fixed offsets): the grid,
    the refinements, then the extensions while the search asks for one (as `fedbench tune`)."""
    trials = [
        search.Trial(p, tuple(curve(p["lr"]) + s for s in seeds)) for p in search.grid({"lr": space}, {"lr": default})
    ]
    for _ in range(refinements):
        point = search.refinement({"lr": space}, trials)
        trials.append(search.Trial(point, tuple(curve(point["lr"]) + s for s in seeds)))
    for _ in range(extensions):
        point = search.extension({"lr": space}, trials, valid)
        if point is None:
            break
        trials.append(search.Trial(point, tuple(curve(point["lr"]) + s for s in seeds)))
    return trials, search.choose({"lr": space}, trials)


def smooth_peak(lr: float) -> float:  # a broad optimum at lr = 0.01, 8 points above the plateau
    return 57.5 + 8 * math.exp(-((math.log10(lr) + 2) ** 2) / 2)


def cliff(lr: float) -> float:  # rising to the edge of stability at 0.02, collapsed beyond it
    return 57.5 + 10 * (math.log10(lr) + 4) / 2.3 if lr <= 0.02 else 20.0


def test_refinement_bisects_both_sides_of_the_smoothed_best():
    space = LogUniform.around(0.001)
    trials, chosen = run_search(smooth_peak, space, 0.001)
    grid_lrs = [t.params["lr"] for t in trials[:6]]
    refined = [t.params["lr"] for t in trials[6:]]
    peak = min(grid_lrs, key=lambda lr: abs(math.log10(lr) + 2))  # the grid point nearest 0.01
    assert all(abs(math.log10(lr / peak)) <= 0.25 + 1e-9 for lr in refined)  # all around the peak
    assert any(lr < peak for lr in refined) and any(lr > peak for lr in refined)  # on both sides
    assert refined == [t.params["lr"] for t in run_search(smooth_peak, space, 0.001)[0][6:]]  # deterministic


def test_the_flag_stays_quiet_on_a_smooth_curve():
    trials, chosen = run_search(smooth_peak, LogUniform.around(0.001), 0.001)
    assert chosen.flags == []
    assert abs(math.log10(trials[chosen.index].params["lr"]) + 2) < 0.2  # found the peak


def test_the_flag_fires_next_to_a_cliff():
    trials, chosen = run_search(cliff, LogUniform.around(0.001), 0.001)
    lr = trials[chosen.index].params["lr"]
    assert lr <= 0.02
    assert any(flag.startswith("next to a jump") for flag in chosen.flags), chosen.flags


def test_the_flag_fires_at_an_end_of_the_range():
    trials, chosen = run_search(lambda lr: 50 + 10 * math.log10(lr), LogUniform.around(0.001), 0.001)
    assert trials[chosen.index].params["lr"] == pytest.approx(0.03)
    assert any("top of its range" in flag for flag in chosen.flags)


def test_one_lucky_draw_beside_a_collapse_loses_to_a_steady_plateau():
    """Points within noise of each other: the smoothed curve prefers the one whose neighbours
    hold up; a failed (diverged) neighbour counts as 0."""
    space = {"lr": LogUniform(1e-4, 1e-1)}
    scores = {1e-4: 55.0, 3.16e-4: 60.0, 1e-3: 61.0, 3.16e-3: 60.5, 1e-2: 61.3, 3.16e-2: None, 1e-1: None}
    trials = [
        search.Trial({"lr": lr}, None if v is None else (v + 1, v - 1, v + 0.5, v - 0.5)) for lr, v in scores.items()
    ]
    chosen = search.choose(space, trials)
    assert trials[chosen.index].params["lr"] == 1e-3  # not 1e-2, the raw best beside a divergence
    assert chosen.within_noise
    assert chosen.flags == []  # 1e-3's neighbours are within noise


def test_the_choice_is_never_separated_from_the_best_point():
    """A point is chosen only when the best single point is not separated from it (paired by
    seed, Holm-corrected: the table's statistics)."""
    rng = np.random.default_rng(0)
    space = {"lr": LogUniform(1e-4, 1e-1)}
    for _ in range(50):
        lrs = np.logspace(-4, -1, 7)
        trials = [
            search.Trial({"lr": float(lr)}, tuple(float(v) for v in 60 + rng.normal(0, 3) + rng.normal(0, 1, 4)))
            for lr in lrs
        ]
        chosen = search.choose(space, trials)
        top = max(range(len(trials)), key=lambda i: trials[i].value)
        others = [i for i in range(len(trials)) if i != top]
        diffs = [np.subtract(trials[top].per_seed, trials[i].per_seed) for i in others]
        marks = dict(zip(others, statements.marks(diffs)[0]))
        assert chosen.index == top or marks[chosen.index] != statements.SEPARATED


def test_a_smoother_point_separated_from_the_best_is_not_chosen():
    """Smoothing alone would pick 3e-3 (its neighbours hold up); but on every seed it scores
    2-3 points below 1e-2, the best point: separated, so the choice is 1e-2 (or a point it is
    not separated from)."""
    space = {"lr": LogUniform(1e-4, 1e-1)}
    rows = [
        (1e-4, (60.0, 60.2, 59.9, 60.1)),
        (3.16e-4, (61.0, 61.1, 60.8, 61.2)),
        (1e-3, (61.5, 61.6, 61.4, 61.7)),
        (3.16e-3, (62.0, 62.1, 61.9, 62.2)),
        (1e-2, (64.9, 64.3, 65.2, 64.8)),
        (3.16e-2, (40.0, 41.0, 39.0, 40.5)),
    ]
    trials = [search.Trial({"lr": lr}, seeds) for lr, seeds in rows]
    curve = search.smoothed(space, trials)
    assert curve[3] > curve[4]  # the old rule's pick by smoothing alone
    chosen = search.choose(space, trials)
    assert trials[chosen.index].params["lr"] == 1e-2


def test_noise_is_the_standard_error_of_one_point():
    trials = [search.Trial({"lr": 0.1 * k}, (60.0 + k, 62.0 + k, 58.0 + k, 60.0 + k)) for k in range(1, 4)]
    std = np.std([60.0, 62.0, 58.0, 60.0], ddof=1)
    assert search.noise(trials) == pytest.approx(std / 2)
    assert math.isnan(search.noise([search.Trial({"lr": 0.1}, (60.0,))]))


def test_a_space_of_choices_has_no_refinement():
    space = {"kind": Choice(("a", "b"))}
    trials = [search.Trial({"kind": "a"}, (1.0, 2.0)), search.Trial({"kind": "b"}, (3.0, 4.0))]
    assert search.refinement(space, trials) is None
    assert trials[search.choose(space, trials).index].params == {"kind": "b"}


def test_the_flag_fires_where_nearly_equal_rates_score_far_apart():
    """The toy table's FedPGP: 0.0271 -> 64.03, 0.0263 -> 61.04 at two seeds."""
    space = {"lr": LogUniform.around(0.001)}
    lrs = [1e-4, 3.16e-4, 1e-3, 3.11e-3, 9.68e-3, 0.0263, 0.0271, 0.03]
    values = [59.8, 60.8, 61.1, 61.5, 62.5, 61.04, 64.03, 62.0]
    trials = [search.Trial({"lr": lr}, (v + 0.4, v - 0.4, v + 0.2, v - 0.2)) for lr, v in zip(lrs, values)]
    chosen = search.choose(space, trials)
    assert any(flag.startswith("next to a jump: lr 0.0263 (61.04) to 0.0271 (64.03)") for flag in chosen.flags)


def test_the_flag_fires_on_a_narrow_peak_that_a_flat_plateau_would_hide():
    """The toy table's pFedMMA (results/toy/tuning.md, 2026-12-05): zero-shot at every seed up to
    lr 0.003 (a spread near 0, which pulls the median noise down), a peak at 0.00966 whose
    neighbours half a decade away score 3-4 points lower. The choice's neighbours differ by more
    than their own spreads explain: flagged, whatever the plateau says of the median."""
    space = {"lr": LogUniform(5e-5, 5e-2)}
    rows = [
        (5e-5, (57.4, 57.4, 57.5, 57.4)),
        (1.6e-4, (57.4, 57.5, 57.4, 57.5)),
        (5e-4, (57.5, 57.4, 57.5, 57.5)),
        (1.6e-3, (57.5, 57.6, 57.5, 57.6)),
        (5.5e-3, (58.9, 61.3, 59.5, 60.3)),
        (9.66e-3, (63.4, 64.6, 63.1, 64.5)),
        (1.7e-2, (60.1, 61.8, 60.0, 61.3)),
        (5e-2, (52.0, 55.0, 50.0, 53.0)),
    ]
    trials = [search.Trial({"lr": lr}, seeds) for lr, seeds in rows]
    chosen = search.choose(space, trials)
    assert trials[chosen.index].params["lr"] == 9.66e-3
    steep = [flag for flag in chosen.flags if "nearest tried neighbour" in flag]
    assert len(steep) == 2, chosen.flags  # one on each side
    assert steep[0].startswith("next to a jump: lr 0.0055 (60.00) to 0.00966 (63.90)"), steep


def test_a_failed_neighbour_of_the_choice_is_flagged():
    space = {"lr": LogUniform(1e-3, 1e-1)}
    trials = [
        search.Trial({"lr": 1e-3}, (58.0, 58.2, 57.9, 58.1)),
        search.Trial({"lr": 1e-2}, (61.0, 61.2, 60.9, 61.1)),
        search.Trial({"lr": 1e-1}, None),
    ]
    chosen = search.choose(space, trials)
    assert any("a neighbour of the choice failed" in flag for flag in chosen.flags), chosen.flags


def peak_past_the_range(lr: float) -> float:  # a broad optimum at lr = 0.1, past the top of [1e-4, 0.03]
    return 57.5 + 8 * math.exp(-((math.log10(lr / 0.1)) ** 2) / 2)


def test_an_extension_steps_past_the_end_where_the_choice_sits():
    space = LogUniform.around(0.001)  # [1e-4, 0.03]
    trials, _ = run_search(peak_past_the_range, space, 0.001)
    point = search.extension({"lr": space}, trials)
    assert point["lr"] == pytest.approx(0.03 * 10**0.5)  # one grid step (half a decade) past the top
    trials, chosen = run_search(peak_past_the_range, space, 0.001, extensions=2)
    assert [t.params["lr"] for t in trials[-2:]] == pytest.approx([0.03 * 10**0.5, 0.3])
    assert trials[chosen.index].params["lr"] > 0.03  # the best rate past the declared range is chosen
    assert not any("beyond it" in flag for flag in chosen.flags)  # 0.3 scores below: inside the values tried


def test_a_curve_still_rising_when_the_extensions_are_spent_is_flagged_with_the_values_tried():
    trials, chosen = run_search(lambda lr: 50 + 10 * math.log10(lr), LogUniform.around(0.001), 0.001, extensions=2)
    assert trials[chosen.index].params["lr"] == pytest.approx(0.3)
    assert any(
        flag.startswith("lr=0.3 is the top of the values tried, [0.0001, 0.3] (declared range [0.0001, 0.03])")
        for flag in chosen.flags
    ), chosen.flags


def test_no_extension_for_a_choice_inside_its_range_or_past_the_valid_values():
    space = LogUniform.around(0.001)
    trials, chosen = run_search(smooth_peak, space, 0.001)
    assert search.extension({"lr": space}, trials) is None  # the peak at 0.01 is inside
    trials, chosen = run_search(peak_past_the_range, space, 0.001, extensions=2, valid={"lr": Range(gt=0, le=0.05)})
    assert max(t.params["lr"] for t in trials) == pytest.approx(0.03)  # 0.095 is not a valid value: none ran
    assert any("top of its range [0.0001, 0.03]" in flag for flag in chosen.flags)


def test_an_extension_steps_below_the_bottom_too():
    space = LogUniform.around(0.001)
    trials, chosen = run_search(lambda lr: 60 - 5 * math.log10(lr), space, 0.001, extensions=1)
    assert trials[-1].params["lr"] == pytest.approx(1e-4 / 10**0.5)
    assert any(flag.startswith("lr=3.162e-05 is the bottom of the values tried") for flag in chosen.flags)


def test_a_collapse_one_extension_step_past_the_next_point_is_next_to_a_jump():
    """The toy FedCLIP of 2026-12-07: the choice 0.09, the extension 0.285 a grid step above it
    scores about as well, 0.9 (two steps above) collapses. The collapse begins one grid step from
    the choice, which the rounding of the log (1.0000000000000002 steps) once hid."""
    space = {"lr": LogUniform(3e-4, 0.09)}
    rows = [(0.003, 57.7), (3e-4, 54.5), (9.487e-4, 56.7), (0.009322, 61.6), (0.02896, 64.6), (0.09, 65.8)]
    rows += [(0.06779, 65.2), (0.05106, 65.0), (0.09 * 10**0.5, 66.8), (0.9, 10.4)]
    # the seeds scatter one way on every other point: 0.09 and 0.2846 are not separated (a
    # constant offset on every seed would make their 1-point gap exact, and 0.2846 the choice)
    scatter = [(1.0, -1.0, 0.5, -0.5), (-1.0, 1.0, -0.5, 0.5)]
    trials = [search.Trial({"lr": lr}, tuple(v + o for o in scatter[k % 2])) for k, (lr, v) in enumerate(rows)]
    chosen = search.choose(space, trials)
    assert trials[chosen.index].params["lr"] == 0.09
    assert any(flag.startswith("next to a jump: lr 0.2846 (66.80) to 0.9 (10.40)") for flag in chosen.flags), (
        chosen.flags
    )
