"""`fedbench reproduce --until-resolved`: seeds spent where they decide a gap of the ranking.

The rule (a two-look design; the table's notes state it):

1. Look 1: every row runs the preset's seeds (3 for the toy world). A row that gives the same
   value on every seed (zero-shot on a fixed test set) is deterministic: it runs no more.
2. The ranking of the block the table is read for (the Average; `tables.rankings`) is marked
   at LOOK_ALPHA = alpha / 2. If every adjacent gap is ≻ or ≈, it stops.
3. Otherwise each open gap's seeds at 80 % power (`statements.seeds_needed` at LOOK_ALPHA,
   from look 1's gap and paired sd) are planned, the gap that needs the fewest first (the
   one more seeds most likely resolve), while the table's cells stay within the budget and
   every row within --max-seeds; a gap that does not fit stays open and is named.
4. Look 2 after those seeds ran: the table is marked at LOOK_ALPHA, and it stops.

Two looks at alpha / 2 each keep the chance of any false ≻ over both looks at most alpha
(Bonferroni over looks; Holm within each look). The plan depends only on look 1's numbers,
which are on disk: a killed run, rerun, plans the same seeds and reuses every finished cell.
The budget is a number of cells (a time is turned into cells with the preset's stated
`cell_seconds`), never a clock read during the run, so every machine ships the same table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from benchmark.sweeps import statements

LOOK_ALPHA = statements.ALPHA / 2


class BudgetError(ValueError):
    """A --budget that is neither a number of cells nor a time the preset can convert."""


def budget_cells(text: str, cell_seconds: float | None, preset: str) -> int:
    """--budget as cells: '85' (cells) or '15m' / '900s' / '1h' turned into cells with the
    preset's `cell_seconds` (floor)."""
    text = str(text).strip()
    if re.fullmatch(r"\d+", text):
        return int(text)
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smh])", text)
    if not match:
        raise BudgetError(f"--budget {text!r}: expected a number of cells (85) or a time (15m, 900s, 1h)")
    if cell_seconds is None:
        raise BudgetError(
            f"--budget {text}: preset {preset} states no cell_seconds to turn a time into cells; give the budget "
            "in cells (e.g. --budget 85) or add 'cell_seconds: S' to the preset"
        )
    seconds = float(match.group(1)) * {"s": 1, "m": 60, "h": 3600}[match.group(2)]
    return int(seconds // cell_seconds)


@dataclass
class SeedPlan:
    """What look 1 decides: row -> the seeds it runs at look 2 (its look-1 seeds included),
    and why the gaps it does not plan stay open."""

    seeds: dict[str, list[int]] = field(default_factory=dict)
    beyond_budget: list[statements.Gap] = field(default_factory=list)
    beyond_max_seeds: list[statements.Gap] = field(default_factory=list)
    resolved: bool = False

    def extra(self, ran: dict[str, list[int]]) -> dict[str, list[int]]:
        """row -> the seeds to add to those it `ran`."""
        out = {row: [s for s in seeds if s not in ran.get(row, [])] for row, seeds in self.seeds.items()}
        return {row: seeds for row, seeds in out.items() if seeds}


def next_seeds(seeds: list[int], n: int) -> list[int]:
    """The first `n` seeds of a row: its own, then the integers after the largest."""
    out = list(seeds)
    while len(out) < n:
        out.append(max(out) + 1)
    return out[:n] if n >= len(seeds) else list(seeds)


def plan_seeds(
    ranking: statements.Ranking,
    ran: dict[str, list[int]],
    cells: int,
    budget: int,
    max_seeds: int,
    constant=(),
    per_seed: int = 1,
) -> SeedPlan:
    """Look 1's plan (rule 3 of the module): `ran` row -> its seeds so far, `cells` the cells
    the table holds, `budget` the most it may hold, `constant` the deterministic rows,
    `per_seed` the cells one seed of a row costs (its datasets and parts)."""
    open_gaps = [g for g in ranking.gaps if g.mark == statements.OPEN]
    plan = SeedPlan(seeds={row: list(seeds) for row, seeds in ran.items()}, resolved=not open_gaps)
    spent = cells
    for gap in sorted(open_gaps, key=lambda g: (g.needed, ranking.rows.index(g.upper))):
        if gap.needed > max_seeds:
            plan.beyond_max_seeds.append(gap)
            continue
        rows = [r for r in (gap.upper, gap.lower) if r not in constant]
        cost = per_seed * sum(max(0, gap.needed - len(plan.seeds[r])) for r in rows)
        if spent + cost > budget:
            plan.beyond_budget.append(gap)
            continue
        for row in rows:
            plan.seeds[row] = next_seeds(plan.seeds[row], max(gap.needed, len(plan.seeds[row])))
        spent += cost
    return plan


def stop_note(plan: SeedPlan, ranking: statements.Ranking, budget: int, cells: int, max_seeds: int) -> str:
    """Why the run stopped, for the table's notes and the terminal."""
    rule = (
        f"Seeds by `--until-resolved`: look 1 at the preset's seeds, look 2 after the planned ones, each marked at "
        f"alpha {LOOK_ALPHA:g} (0.05 split over the 2 looks); an open gap got the seeds that give it "
        f"{statements.POWER * 100:g} % power, the cheapest gap first, within {budget} cells and {max_seeds} seeds a row "
        f"(the table holds {cells} cells)."
    )
    open_now = [g for g in ranking.gaps if g.mark == statements.OPEN]
    if not open_now:
        return rule + " Stopped: every adjacent gap is ≻ or ≈."
    named = "; ".join(f"{g.upper} – {g.lower} ({g.text()})" for g in open_now)
    why = []
    if plan.beyond_budget:
        why.append(
            "the seeds of " + ", ".join(f"{g.upper} – {g.lower}" for g in plan.beyond_budget) + " exceed the budget"
        )
    if plan.beyond_max_seeds:
        why.append(
            "those of " + ", ".join(f"{g.upper} – {g.lower}" for g in plan.beyond_max_seeds) + " exceed --max-seeds"
        )
    if not why:
        why.append("look 2 is the last look")
    return rule + f" Stopped with {len(open_now)} gap(s) open ({named}): " + "; ".join(why) + "."
