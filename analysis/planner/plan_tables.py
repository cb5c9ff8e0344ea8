"""The plan as tables of text cells, shared by ``islands plan`` (plain text) and the HTML report."""

from __future__ import annotations

from dataclasses import dataclass, field

from islands.scenarios.spec import MAX_REPLICAS
from islands.schedules import SCHEDULES
from islands.schedules.gather import DIRECT, GATHERS, RING, STORE
from islands.tables import CUT_SHORT, duration, render, size

from ..display_units import percent_text as percent
from ..display_units import rate_text as rate
from .crossover import Crossover, Intervals
from .plan import Plan, payload_of
from .search import MAX_GBPS, MAX_INNER_STEPS, Answer

KEY_SYMBOLS = {"inner_steps": "H", "fragments": "P", "overlap_steps": "tau"}

UNREACHED = "unreachable"


@dataclass(frozen=True)
class Table:
    title: str
    header: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        return "\n".join([self.title, render(self.rows, self.header), *self.notes])


def link_rates(plan: Plan) -> str:
    """The scenario's own access-link rate(s), e.g. "1 Gbit/s", "110 Mbit/s up, 500 Mbit/s down" or
    "100 Mbit/s to 10 Gbit/s" (each island's slower direction)."""
    pairs = {(island.upload_gbps, island.download_gbps) for island in plan.scenario.islands}
    if len(pairs) == 1:
        up, down = pairs.pop()
        return rate(up) if up == down else f"{rate(up)} up, {rate(down)} down"
    rates = sorted({island.bandwidth_gbps for island in plan.scenario.islands})
    return rate(rates[0]) if len(rates) == 1 else f"{rate(rates[0])} to {rate(rates[-1])}"


def schedule_with_keys(plan: Plan, algorithm: str, leave_out: tuple[str, ...] = ()) -> str:
    """The schedule's label and the values of the keys it reads, e.g. "Streaming DiLoCo H=500 P=10 tau=20"."""
    declared, schedule = SCHEDULES[algorithm], plan.scenario.schedule
    keys = [key for key in declared.reads if key in KEY_SYMBOLS and key not in leave_out]
    return " ".join(
        [declared.label, *(f"{KEY_SYMBOLS[key]}={getattr(schedule, key)}" for key in keys)]
    )


FELL = "~"  # marks an answer whose runs did not rise with the value searched


def bandwidth_cell(found: Answer) -> str:
    return (rate(found.value) if found.value is not None else UNREACHED) + (
        "" if found.monotone else FELL
    )


def fell_note(answers: list[Answer], value: str) -> list[str]:
    """A note for answers whose runs did not rise with the value searched."""
    if all(found.monotone for found in answers):
        return []
    return [
        f"{FELL}: utilisation fell between two runs as {value} grew (one seed's draw of jitter or churn moves "
        "with it): the value is where one run reached the target, not a threshold; --seeds N averages the "
        "draws."
    ]


def utilisation_cell(fraction: float | None) -> str:
    """A utilisation, or ``cut short`` where churn stopped the run before its end."""
    return CUT_SHORT if fraction is None else percent(fraction)


def cut_short_note(answers: list[Answer]) -> list[str]:
    """A note counting the runs that churn cut short, which the searches counted as not reaching."""
    count = sum(found.cut_short for found in answers)
    if not count:
        return []
    return [
        f"{count} runs were {CUT_SHORT} by churn or refused as beyond --max-events: they count as not "
        "reaching the target, so every answer above comes from a finished run."
    ]


def bandwidth_table(plan: Plan) -> Table:
    header = ["schedule", *(percent(t) for t in plan.targets), f"utilisation at {link_rates(plan)}"]
    rows = [
        [
            schedule_with_keys(plan, a),
            *(bandwidth_cell(plan.bandwidth[a][t]) for t in plan.targets),
            utilisation_cell(plan.now[a]),
        ]
        for a in plan.bandwidth
    ]
    notes = []
    if any(not found.reached for row in plan.bandwidth.values() for found in row.values()):
        notes.append(
            f"{UNREACHED}: not reached even at {rate(MAX_GBPS)}: latency, stragglers or churn bound "
            "the utilisation"
        )
    notes += [
        f"{CUT_SHORT} ({schedule_with_keys(plan, a)}): {reason}"
        for a, reason in plan.now_cut_short.items()
    ]
    notes += cut_short_note([found for row in plan.bandwidth.values() for found in row.values()])
    notes += fell_note(
        [found for row in plan.bandwidth.values() for found in row.values()], "bandwidth"
    )
    notes += plan.left_out
    return Table(
        "Bandwidth per island needed for each compute utilisation (every island's link at that rate)",
        header,
        rows,
        notes,
    )


def inner_steps_table(plan: Plan) -> Table:
    slowest_step_s = max(island.step_time_s for island in plan.scenario.islands)
    header = ["schedule", "smallest H", "utilisation there", "compute between syncs"]
    rows = []
    for algorithm, found in plan.inner_steps.items():
        label = schedule_with_keys(plan, algorithm, leave_out=("inner_steps",))
        if found.value is not None:
            rows.append(
                [
                    label,
                    str(found.value) + ("" if found.monotone else FELL),
                    percent(found.utilisation),
                    duration(found.value * slowest_step_s),
                ]
            )
        else:
            best = (
                f"best {percent(found.utilisation)}, at H={found.tried}"
                if found.utilisation is not None
                else f"every run {CUT_SHORT}"
            )
            rows.append([label, UNREACHED, best, "-"])
    notes = [
        f"{SCHEDULES[name].label} does not sync every H steps: it has no H to raise."
        for name in plan.bandwidth
        if name not in plan.inner_steps
    ]
    if not all(found.reached for found in plan.inner_steps.values()):
        notes.append(
            f"{UNREACHED}: utilisation stopped growing with H (churn or stragglers cost more as "
            f"intervals lengthen) or H reached {MAX_INNER_STEPS}."
        )
    notes += cut_short_note(list(plan.inner_steps.values()))
    notes += fell_note([found for found in plan.inner_steps.values() if found.reached], "H")
    return Table(
        f"Smallest H reaching {percent(plan.target)} at the scenario's bandwidth ({link_rates(plan)})",
        header,
        rows,
        notes,
    )


def fragments_table(plan: Plan) -> Table:
    schedule = plan.scenario.schedule
    counts = sorted({p for p, _ in plan.fragments})
    widths = sorted({b for _, b in plan.fragments}, reverse=True)
    header = ["fragments P", *(f"{b}-bit" for b in widths)]
    rows = [[str(p), *(bandwidth_cell(plan.fragments[(p, b)]) for b in widths)] for p in counts]
    best = plan.best_fragments()
    notes = []
    if best is not None:
        least_gbps = plan.fragments[best].value
        assert least_gbps is not None, (
            "the best is among the answers that reached the target (best_fragments)"
        )
        own = plan.fragments.get((schedule.fragments, schedule.bits))
        needs = f"needs {rate(own.value)}" if own and own.value is not None else "cannot reach it"
        against = (
            f"; the scenario's P={schedule.fragments} at {schedule.bits}-bit {needs}" if own else ""
        )
        notes.append(
            f"Least peak bandwidth: P={best[0]} at {best[1]}-bit, "
            f"{rate(least_gbps)} per island{against}."
        )
    notes.append(
        "The simulator charges nothing for quantisation error or for staler fragments: fewer bits "
        "and more fragments always look cheaper here; --objective time-to-loss prices the loss "
        "(published tables, or your model's with islands quality)."
    )
    notes += cut_short_note(list(plan.fragments.values()))
    notes += fell_note(list(plan.fragments.values()), "bandwidth")
    return Table(
        f"Streaming at H={schedule.inner_steps}, tau={schedule.overlap_steps}: peak bandwidth per "
        f"island needed for {percent(plan.target)}, by fragments and wire precision",
        header,
        rows,
        notes,
    )


def density_table(plan: Plan) -> Table:
    """Per density: the payload, the least bandwidth at the scenario's H, the smallest H at its links."""
    schedule = plan.scenario.schedule
    slowest_step_s = max(island.step_time_s for island in plan.scenario.islands)
    header = [
        "density",
        f"kept of {schedule.chunk_values}",
        "payload",
        f"bandwidth for {percent(plan.target)}",
        "smallest H",
        "compute between syncs",
    ]
    rows = []
    for k, found in plan.density_bandwidth.items():
        steps = plan.density_inner_steps[k]
        own = " (scenario)" if k == schedule.topk else ""
        rows.append(
            [
                f"{100 * k / schedule.chunk_values:.3g}%{own}",
                str(k),
                size(payload_of(plan.scenario, k)),
                bandwidth_cell(found),
                UNREACHED
                if steps.value is None
                else str(steps.value) + ("" if steps.monotone else FELL),
                "-" if steps.value is None else duration(steps.value * slowest_step_s),
            ]
        )
    answers = [*plan.density_bandwidth.values(), *plan.density_inner_steps.values()]
    notes = [
        "payload: one worker's top-k payload of the whole model (values, places, side table). The "
        "simulator charges nothing for what a lower density leaves in the error-feedback buffer: "
        "fewer values always look cheaper here (docs/how-to/compression.md).",
        *cut_short_note(answers),
        *fell_note(answers, "the value searched"),
    ]
    return Table(
        f"{schedule_with_keys(plan, schedule.algorithm)} at {schedule.bits}-bit values: by top-k "
        f"density, the bandwidth per island for {percent(plan.target)} (every island's link at that "
        f"rate) and the smallest H at the scenario's links ({link_rates(plan)})",
        header,
        rows,
        notes,
    )


def runs_text(runs: Intervals) -> str:
    """Runs of M as text: "2 to 73", "every M from 2", "never"."""
    if not runs:
        return "never"
    return ", ".join(
        f"every M from {first}" if last == MAX_REPLICAS else f"{first} to {last}"
        for first, last in runs
    )


def crossover_table(plan: Plan, found: Crossover) -> Table:
    """Against a dense ring at each dense format: the M at which each gather is faster."""
    every = "every worker's" if found.peers is None else f"K={found.peers}"
    labels = {RING: "ring all-gather", DIRECT: f"direct ({every})", STORE: f"store ({every})"}
    header = ["dense ring", "S per worker", *(labels[gather] for gather in GATHERS)]
    rows = [
        [
            f"{row.dense_bits}-bit",
            size(row.dense_bytes),
            *(runs_text(row.beats[gather]) for gather in GATHERS),
        ]
        for row in found.rows
    ]
    links = found.links
    store = (
        ""
        if links.ingress_gbps is None and links.egress_gbps is None
        else "; the store's ingress "
        + ("unbounded" if links.ingress_gbps is None else rate(links.ingress_gbps))
        + " and egress "
        + ("unbounded" if links.egress_gbps is None else rate(links.egress_gbps))
    )
    notes = [
        f"The workers M at which gathering the {size(found.payload_bytes)} top-k payload (s) takes "
        f"less time than a dense ring all-reduce of S, every worker on {rate(links.up_gbps)} up and "
        f"{rate(links.down_gbps)} down{store}, bandwidth terms only (latency favours the gather: its "
        f"rounds take fewer hops), M up to {MAX_REPLICAS:,}. The scenario gathers by "
        f'network.gather = "{found.gather}".',
        "Around a ring or directly every worker sends (M - 1) s against the ring's 2 (M - 1) / M x S: "
        "gathering stops beating it above M = 2 S / s"
        + "".join(
            f"; {row.dense_bits}-bit: {2 * row.dense_bytes / found.payload_bytes:.1f}"
            for row in found.rows
        )
        + ". Through the store a worker sends s and receives K s whatever M, unless the store's own "
        "links or K = M make it grow (docs/how-to/compression.md).",
    ]
    return Table(
        "Where gathering top-k payloads stops beating a dense ring as the workers M grow",
        header,
        rows,
        notes,
    )


def headline(plan: Plan) -> str:
    """One sentence: what each schedule needs for the target, against what the scenario has."""
    needs = ", ".join(
        f"{SCHEDULES[a].label} {bandwidth_cell(plan.bandwidth[a][plan.target])}"
        for a in plan.bandwidth
    )
    return f"For {percent(plan.target)} compute utilisation each island needs: {needs} (it has {link_rates(plan)})."


def plan_tables(plan: Plan) -> list[Table]:
    tables = [bandwidth_table(plan), inner_steps_table(plan)]
    if plan.fragments:
        tables.append(fragments_table(plan))
    if plan.density_bandwidth:
        tables.append(density_table(plan))
    if plan.crossover is not None:
        tables.append(crossover_table(plan, plan.crossover))
    return tables
