"""What a table can say about its order: pure functions over per-seed values, from scipy.stats.

A table's rows are ranked by their mean over seeds; what a reader needs is which of those
orders the seeds support. For every adjacent pair of the ranking (`rank_statements`) the
paired difference (same seeds) gets a Student t interval and one mark:

- `≻` separated: the two-sided paired t-test rejects "no difference" at `alpha`, Holm-corrected
  over the gaps of the statement;
- `≈` equivalent: both one-sided t-tests of TOST reject a difference as large as `margin`
  (default 1 point, above the 0.65 points CPU kernels move a row), Holm-corrected likewise;
  a gap both separated and inside the margin is printed `≈`: its sign is clear, its size
  is below what another CPU can move;
- `?` open, with the seeds the pair would need (`seeds_needed`: 80 % power, at the observed
  gap and paired sd, of a two-sided paired t-test at alpha / gaps, or of TOST when the gap
  is inside the margin; the smaller; never fewer than its pairs + 1).

Why the t interval and test at every n (and no bootstrap for a mean): the percentile
bootstrap of a mean of 3 values is the range of the 3 values, whose coverage is about 76 %;
the t interval's is 95 % for normal data and within 2 points of it for the mildly skewed
differences of a table (tests/sweeps/test_statements.py simulates both at n = 3, 5, 10).
BCa at n >= 10 would add nothing the t interval lacks there. Each row also gets a 95 % rank
interval (bootstrap over seeds: the seeds are the blocks, every row resampled with the same
seeds) and each gap the probability that the upper row beats the lower on a seed, with its
Clopper-Pearson interval. `signflip_p` is the distribution-free check printed beside the
t-test in differences.csv; below 6 pairs it cannot reach 5 % (its smallest p is 2 / 2^n),
and says so instead of printing a p that cannot reject.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
from scipy import stats

ALPHA = 0.05
MARGIN = 1.0  # HM points; docs/toy-world.md measures CPU kernels moving a row by up to 0.65
POWER = 0.8
LEVEL = 0.95
RANK_RESAMPLES = 2000
RANK_SEED = 0
SIGNFLIP_MIN_PAIRS = 6  # the fewest pairs whose exact two-sided sign-flip p can be below 0.05
MAX_SEEDS = 100_000  # seeds_needed beyond this is printed as "> 100000"

SEPARATED, EQUIVALENT, OPEN = "≻", "≈", "?"


def t_interval(values, level: float = LEVEL) -> tuple[float, float]:
    """The Student t interval of the mean of `values` (NaN, NaN below 2 values)."""
    values = np.asarray(values, dtype=float)
    n = len(values)
    if n < 2:
        return float("nan"), float("nan")
    mean, sem = values.mean(), values.std(ddof=1) / np.sqrt(n)
    half = stats.t.ppf(0.5 + level / 2, n - 1) * sem
    return float(mean - half), float(mean + half)


def _one_sample_p(diffs: Sequence[np.ndarray], popmean: float, alternative: str) -> np.ndarray:
    """`stats.ttest_1samp`'s p of each array of `diffs` (one call per array length, for speed),
    NaN below 2 values; for an array that does not vary, 0 where it lies on the alternative's
    side of `popmean` and 1 where not (the limit of the t statistic)."""
    p = np.full(len(diffs), np.nan)
    by_length: dict[int, list[int]] = {}
    for k, d in enumerate(diffs):
        if len(d) < 2:
            continue
        if np.ptp(d) <= 1e-9 * (1 + np.abs(d).max()):  # constant up to rounding (60.3 - 60.0 on every seed)
            side = {"two-sided": d[0] != popmean, "greater": d[0] > popmean, "less": d[0] < popmean}[alternative]
            p[k] = 0.0 if side else 1.0
        else:
            by_length.setdefault(len(d), []).append(k)
    for indices in by_length.values():
        stacked = np.stack([diffs[k] for k in indices])
        p[indices] = stats.ttest_1samp(stacked, popmean, axis=1, alternative=alternative).pvalue
    return p


def signflip_p(diffs) -> float:
    """Exact two-sided sign-flip (paired permutation) p of the mean difference; NaN below
    SIGNFLIP_MIN_PAIRS pairs, where no outcome can reach 0.05. Exact up to 16 pairs, then
    10 000 seeded random flips."""
    diffs = np.asarray(diffs, dtype=float)
    if len(diffs) < SIGNFLIP_MIN_PAIRS:
        return float("nan")
    if np.all(diffs == 0):
        return 1.0
    exact = len(diffs) <= 16
    result = stats.permutation_test(
        (diffs,),
        np.mean,
        permutation_type="samples",
        n_resamples=np.inf if exact else 10_000,
        alternative="two-sided",
        random_state=None if exact else np.random.default_rng(RANK_SEED),
    )
    return float(result.pvalue)


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (NaN stays NaN): reject where adjusted < alpha."""
    p = np.asarray(pvalues, dtype=float)
    adjusted = np.full_like(p, np.nan)
    known = np.flatnonzero(~np.isnan(p))
    order = known[np.argsort(p[known], kind="stable")]
    m = len(order)
    running = 0.0
    for k, index in enumerate(order):
        running = max(running, min(1.0, (m - k) * p[index]))
        adjusted[index] = running
    return adjusted


def _above(t: float, df: int, nc: float) -> float:
    """P(T > t) for a noncentral t. scipy's nct answers NaN far out in a tail (a clear gap
    at a Holm-corrected alpha: nc 9, t -7, df 4), where the normal approximation is exact to
    the digits that matter; a NaN taken as a number would make every such n look unresolved."""
    value = stats.nct.sf(t, df, nc)
    return float(value) if np.isfinite(value) else float(stats.norm.sf(t - nc))


def _below(t: float, df: int, nc: float) -> float:
    """P(T < t) for a noncentral t, with `_above`'s fallback."""
    value = stats.nct.cdf(t, df, nc)
    return float(value) if np.isfinite(value) else float(stats.norm.cdf(t - nc))


def seeds_needed(mean: float, sd: float, margin: float = MARGIN, alpha: float = ALPHA, power: float = POWER) -> int:
    """The fewest paired seeds at which a gap of `mean` with paired sd `sd` is resolved with
    `power`: separated (two-sided paired t-test at `alpha`) or, when |mean| < margin, shown
    equivalent (TOST at `alpha`, power bounded below by the sum of its two one-sided powers
    minus 1); the smaller of the two. MAX_SEEDS + 1 when neither is reached by MAX_SEEDS."""
    if not np.isfinite(mean) or not np.isfinite(sd):
        return MAX_SEEDS + 1
    if sd == 0:
        return 2

    def resolved(n: int) -> bool:  # power grows with n: bisection finds the first n
        df, shift = n - 1, np.sqrt(n) / sd
        two_sided = stats.t.ppf(1 - alpha / 2, df)
        nc = abs(mean) * shift
        if _above(two_sided, df, nc) + _below(-two_sided, df, nc) >= power:
            return True
        if abs(mean) >= margin:
            return False
        one_sided = stats.t.ppf(1 - alpha, df)
        upper = _above(one_sided, df, (margin - mean) * shift)
        lower = _above(one_sided, df, (margin + mean) * shift)
        return upper + lower - 1 >= power

    # doubling, then bisection: scipy's nct returns NaN far out in its tail (n in the
    # thousands for a clear gap), where the power is 1 anyway
    high = 2
    while not resolved(high):
        if high >= MAX_SEEDS:
            return MAX_SEEDS + 1
        high = min(2 * high, MAX_SEEDS)
    low = high // 2 if high > 2 else 1  # not resolved(low)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if resolved(middle) else (middle, high)
    return high


def beats_probability(diffs, level: float = LEVEL) -> tuple[float, float, float]:
    """P(upper row beats lower row on a seed): the share of pairs with a positive difference
    (a tie does not beat), with its Clopper-Pearson interval."""
    diffs = np.asarray(diffs, dtype=float)
    if len(diffs) == 0:
        return float("nan"), float("nan"), float("nan")
    wins = int((diffs > 0).sum())
    interval = stats.binomtest(wins, len(diffs)).proportion_ci(level, method="exact")
    return wins / len(diffs), float(interval.low), float(interval.high)


def rank_intervals(
    matrix: np.ndarray, level: float = LEVEL, resamples: int = RANK_RESAMPLES, seed: int = RANK_SEED
) -> tuple[np.ndarray, np.ndarray]:
    """Per row of `matrix` (rows x seeds, NaN where a row did not run a seed) the `level` interval
    of its rank (1 = highest mean) under a bootstrap over seeds: each resample draws the seeds
    with replacement, the same draw for every row, and a row's mean is over the drawn seeds it
    ran (its own mean when it ran none of them)."""
    matrix = np.asarray(matrix, dtype=float)
    rows, seeds = matrix.shape
    ran = ~np.isnan(matrix)
    filled = np.where(ran, matrix, 0.0)
    own = np.nanmean(np.where(ran, matrix, np.nan), axis=1)
    weights = np.random.default_rng(seed).multinomial(seeds, np.full(seeds, 1 / seeds), size=resamples)
    total = weights @ filled.T  # resamples x rows
    count = weights @ ran.T.astype(float)
    means = np.where(count > 0, total / np.where(count > 0, count, 1), own)
    ranks = (-means).argsort(axis=1, kind="stable").argsort(axis=1) + 1
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(ranks, [tail, 100 - tail], axis=0, method="nearest")
    return low.astype(int), high.astype(int)


@dataclass
class Gap:
    """One adjacent pair of a ranking (upper ranked above lower) or a named comparison."""

    upper: str
    lower: str
    pairs: int
    mean: float
    low: float
    high: float
    p: float  # paired t-test, two-sided
    p_holm: float
    p_equivalent: float  # TOST
    p_equivalent_holm: float
    p_signflip: float
    beats: float
    beats_low: float
    beats_high: float
    mark: str
    needed: int  # seeds to resolve an open gap (0 when resolved)

    def text(self) -> str:
        """The gap as the table prints it: '≻ 9.50 [2.1, 16.9]' or '? ≈ 66 seeds'."""
        if self.mark == OPEN:
            seeds = f"> {MAX_SEEDS}" if self.needed > MAX_SEEDS else f"≈ {self.needed}"
            return f"? {seeds} seeds" if self.pairs >= 2 else "? (one pair: no test)"
        return f"{self.mark} {self.mean:.2f} [{self.low:.2f}, {self.high:.2f}]"


@dataclass
class Ranking:
    """Rows by decreasing mean, each with its n, t interval and 95 % rank interval, and the
    gaps between adjacent rows, marked."""

    rows: list[str]
    means: list[float]
    n: list[int]
    low: list[float]
    high: list[float]
    rank_low: list[int]
    rank_high: list[int]
    gaps: list[Gap] = field(default_factory=list)
    alpha: float = ALPHA
    margin: float = MARGIN

    def headline(self, names: Mapping[str, str] | None = None) -> str:
        """The ranking as statements: rows joined by ≻, the rows no ≻ separates in braces with
        what joins them and the seeds the open gaps need: 'a ≻ b ≻ {c ? d ≈ e} (open: ≈ 10–95
        seeds)'."""
        name = (names or {}).get
        groups: list[list[int]] = [[0]] if self.rows else []
        for k, gap in enumerate(self.gaps):
            if gap.mark == SEPARATED:
                groups.append([k + 1])
            else:
                groups[-1].append(k + 1)
        parts = []
        for group in groups:
            if len(group) == 1:
                parts.append(name(self.rows[group[0]], self.rows[group[0]]))
                continue
            inner = name(self.rows[group[0]], self.rows[group[0]])
            for k in group[1:]:
                inner += f" {self.gaps[k - 1].mark} {name(self.rows[k], self.rows[k])}"
            needed = [self.gaps[k - 1].needed for k in group[1:] if self.gaps[k - 1].mark == OPEN]
            text = "{" + inner + "}"
            if needed:
                low, high = min(needed), max(needed)
                shown = [f"> {MAX_SEEDS}" if v > MAX_SEEDS else f"≈ {v}" for v in (low, high)]
                text += f" (open: {shown[0]}{'' if low == high else '–' + shown[1].lstrip('≈ ')} seeds)"
            parts.append(text)
        return " ≻ ".join(parts)


def marks(
    diffs: Sequence[np.ndarray], alpha: float = ALPHA, margin: float = MARGIN
) -> tuple[list[str], list[float], np.ndarray, list[float], np.ndarray]:
    """The marks of one family of paired differences (each upper - lower), Holm-corrected over
    the family for separation and for equivalence alike: (marks, p, p_holm, p_equivalent,
    p_equivalent_holm)."""
    p = _one_sample_p(diffs, 0.0, "two-sided")
    # TOST: the larger p of "above -margin" and "below +margin"
    p_eq = np.maximum(_one_sample_p(diffs, -margin, "greater"), _one_sample_p(diffs, margin, "less"))
    if margin <= 0:
        p_eq[:] = 1.0
    p_holm, p_eq_holm = holm(p), holm(p_eq)
    shown = [
        EQUIVALENT if e < alpha else (SEPARATED if s < alpha and np.mean(d) > 0 else OPEN)
        for d, s, e in zip(diffs, p_holm, p_eq_holm)
    ]
    return shown, p, p_holm, p_eq, p_eq_holm


def compare(pairs: Sequence[tuple[str, str, np.ndarray]], alpha: float = ALPHA, margin: float = MARGIN) -> list[Gap]:
    """Each (upper, lower, paired differences upper - lower) of one family as a marked Gap
    (`marks`), with its interval, P(beats), sign-flip p and, when open, the seeds it needs."""
    diffs = [np.asarray(d, dtype=float) for _, _, d in pairs]
    shown, *ps = marks(diffs, alpha, margin)
    gaps = []
    for (upper, lower, _), d, mark, *p in zip(pairs, diffs, shown, *ps):
        mean = float(d.mean()) if len(d) else float("nan")
        sd = float(d.std(ddof=1)) if len(d) > 1 else float("nan")
        # planned at alpha / gaps (Bonferroni: the level Holm's first step tests at), and
        # always more than the pairs it has: an open gap is open at its n
        level = alpha / max(1, len(pairs))
        needed = 0 if mark != OPEN else max(len(d) + 1, seeds_needed(mean, sd, margin, level))
        interval = t_interval(d)
        gaps.append(Gap(upper, lower, len(d), mean, *interval, *p, signflip_p(d), *beats_probability(d), mark, needed))
    return gaps


def rank_statements(
    values: Mapping[str, Mapping], alpha: float = ALPHA, margin: float = MARGIN, constant: Sequence[str] = ()
) -> Ranking:
    """The ranking of `values` (row -> {seed or (dataset, seed): value}) with its statements.
    Adjacent rows are paired on the seeds both ran; a row in `constant` (deterministic: it
    ran once, or gave the same value on every seed) pairs with every seed of the other."""
    rows = sorted(values, key=lambda r: (-np.mean(list(values[r].values())), r))
    seeds = sorted({s for r in rows for s in values[r]}, key=str)
    matrix = np.array([[values[r].get(s, np.nan) for s in seeds] for r in rows], dtype=float)
    for i, r in enumerate(rows):
        if r in constant:
            matrix[i] = next(iter(values[r].values()))
    pairs = []
    for i in range(len(rows) - 1):
        both = ~np.isnan(matrix[i]) & ~np.isnan(matrix[i + 1])
        pairs.append((rows[i], rows[i + 1], matrix[i, both] - matrix[i + 1, both]))
    rank_low, rank_high = rank_intervals(matrix) if rows else ([], [])
    intervals = [t_interval(list(values[r].values())) for r in rows]
    return Ranking(
        rows=rows,
        means=[float(np.mean(list(values[r].values()))) for r in rows],
        n=[len(values[r]) for r in rows],
        low=[i[0] for i in intervals],
        high=[i[1] for i in intervals],
        rank_low=[int(x) for x in rank_low],
        rank_high=[int(x) for x in rank_high],
        gaps=compare(pairs, alpha, margin),
        alpha=alpha,
        margin=margin,
    )


def points(margin: float) -> str:
    """The margin as the notes print it: '1 point', '2.5 points'."""
    return f"{margin:g} point{'' if margin == 1 else 's'}"


def method_note(ranking: Ranking, pairing: str = "seeds") -> str:
    """The table's statement of its method: test, interval, margin, alpha, correction, n."""
    n = sorted(set(ranking.n))
    shown = str(n[0]) if len(n) == 1 else f"{n[0]}–{n[-1]}"
    return (
        f"Marks between adjacent rows (paired by {pairing}; n = {shown} per row): ≻ separated (two-sided paired "
        f"t-test, Holm-corrected over the {len(ranking.gaps)} gaps, alpha {ranking.alpha:g}); ≈ equivalent "
        f"within {points(ranking.margin)} (TOST, Holm-corrected likewise; a gap both separated and within the "
        f"margin is ≈); ? open, with the seeds that would resolve it at {POWER * 100:g} % power (two-sided "
        f"paired t-test at alpha / {len(ranking.gaps)}, at the observed gap and paired sd, or TOST when the gap is within the margin). Interval: 95 % t interval of the paired mean "
        "difference. rank: the 95 % interval of the row's rank over 2000 bootstrap resamples of the seeds. "
        "P(beats next): the share of paired seeds on which the row beats the next, with its 95 % Clopper-Pearson "
        "interval (docs/reading-a-row.md)."
    )
