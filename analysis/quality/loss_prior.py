"""What the published tables say a schedule costs in quality: evaluation loss at equal tokens.

The prior is built from tables only; where a paper gives an effect only as a figure, the prior
does not price it and says so in the estimate's ``notes``.

* **Model size N and replicas M** (at H = 30): Charles et al. 2025, "Scaling Laws for DiLoCo"
  (arXiv:2503.09799), Table 7: L(N) = A N^alpha fitted for data parallelism and for DiLoCo with
  M = 1, 2, 4, 8 (models of 35M to 2.4B parameters, Chinchilla-optimal tokens, C4). Between two
  published M, log L is interpolated linearly in log M; beyond M = 8 the M = 8 law is extended with
  the joint fit's exponent of M (Table 10, beta = 0.0116), and the estimate is marked. Against the
  paper's own Table 4 the laws give every DiLoCo-vs-DP difference within 0.3 points of percentage.
* **Fragments and the eager update**: Kale et al. 2025, "Eager Updates" (arXiv:2502.12996), Table 3
  (500M parameters, H = 30): DiLoCo 2.68, Streaming DiLoCo 2.67; with the eager update (a whole
  outer step overlapped) 2.69 and 2.71.
* **Overlap of tau inner steps**: the same paper, Table 2: tau = 1 gives 2.67, as without overlap.
  tau above 1 is beyond the table and marked.
* **Wire precision**: Streaming DiLoCo (arXiv:2501.18512) shows FP8 and FP4 outer gradients
  without a significant loss at billion scale in a figure only (Figure 11): read as no penalty.
* **H**: the one published number is in the text of Douillard et al. 2023, "DiLoCo" (arXiv:2311.08105),
  Section 3, "Communication frequency": a 150M model, 8 replicas, non-i.i.d. shards, "when H = 1000
  the perplexity increases by only 2.9% relative to H = 50". At that run's perplexity of about 15
  (its Table 3: 15.02) that is ln(1.029) / ln(15.02) = +1.06% of loss over ln(20) of H: the prior adds
  ``H_PENALTY_PER_LOG_H`` = 0.352% of loss per e-fold of H above the tables' H = 30 (log-linear: the
  paper's figure, over H = 50 to 2000, is flatter below H = 500 than above). The scaling-law paper
  shows (Figure 15, a figure only) the rise smaller for larger models, so at billions of parameters
  this is an upper bound, and the estimate says so; below H = 30 nothing is priced (its tables hold
  H = 30 and its figure has every H > 1 "comparable"); above the figure's H = 2000 it is extended
  and marked. ``islands quality`` measures H on the user's own model.

**Bounds**: the laws are pure power laws without an irreducible term, so at about 6.5e10 parameters
the data-parallel law falls below Chinchilla's irreducible loss E = 1.69 (and at 1e14 it would
predict 0.84). DDP's loss is clamped there and the estimate says so (E is Hoffmann et al.'s, fitted on
MassiveText, not C4: a stand-in floor, marked as one). A schedule's loss is DDP's clamped loss times
its relative penalty (1 + p), so a penalty survives the clamp; only a schedule better than DDP at the
floor is clamped too (nothing goes below E). Sizes outside the fitted 35M-2.4B and the paper's own
check runs up to 10B (Table 5) are marked as extrapolated. Beyond 10B the DiLoCo laws' ratio to the DP
law is held at its value at 10B, the largest size the paper ran: extrapolated, the two exponents
diverge (at 1e12, M = 8 would beat DP by 3.0%, while Table 5 shows the gap at 10B no smaller than at
2.4B), and the estimate says so.

**Tokens to DDP's loss** (``extra_tokens_factor``): a schedule whose loss at D tokens is (1 + p) times
DDP's needs D' tokens to reach DDP's loss at D, from Hoffmann et al. 2022's fit L(N, D) = E + A / N^a
+ B / D^b (arXiv:2203.15556, eq. 10: E = 1.69, A = 406.4, B = 410.7, a = 0.34, b = 0.28), the penalty
taken to scale the whole loss at any D: (1 + p) L(N, D') = L(N, D). D is Chinchilla-optimal, 20 N,
as in the scaling-law tables.

A schedule enters through its declaration, never its name: one that averages the gradient every
step (``exchanged == GRADIENT``) is data-parallel; every other one is DiLoCo with M = the
scenario's workers, its fragments, its overlap and its update rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from islands.schedules import AVERAGE, EAGER, GRADIENT, SCHEDULES, Schedule
from islands.schedules.compression import NONE

from .quality_profile import QualityProfile

# Charles et al. 2025, Table 7: L(N) = A * N ** alpha.
DATA_PARALLEL_LAW = (18.129, -0.0953)
DILOCO_LAWS = {
    1: (18.363, -0.0961),
    2: (18.768, -0.0969),
    4: (19.762, -0.0992),
    8: (21.051, -0.1018),
}
JOINT_M_EXPONENT = 0.0116  # Table 10, the loss law's beta
PUBLISHED_H = 30
# Kale et al. 2025, Table 3 (500M parameters, H = 30): DiLoCo 2.68, Streaming 2.67; eager 2.69, 2.71.
FRAGMENTED_FACTOR = 2.67 / 2.68  # Streaming DiLoCo / DiLoCo
EAGER_FACTOR = {False: 2.69 / 2.68, True: 2.71 / 2.67}  # eager / not, by fragmented
PUBLISHED_MAX_OVERLAP_STEPS = 1  # Table 2: tau = 1 gives 2.67, as tau = 0
# Hoffmann et al. 2022, eq. 10: L(N, D) = E + A / N**ALPHA + B / D**BETA; D = 20 N (Chinchilla-optimal).
CHINCHILLA = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
CHINCHILLA_TOKENS_PER_PARAMETER = 20
# Douillard et al. 2023, Section 3: perplexity +2.9% from H = 50 to H = 1000 at perplexity 15.02 (Table 3).
H_PENALTY_PER_LOG_H = math.log(1.029) / math.log(15.02) / math.log(1000 / 50)
H_PUBLISHED_MAX = 2000  # the range of that paper's figure of H
H_MEASURED_PARAMETERS = 150e6
FITTED_PARAMETERS = (35e6, 10e9)  # Table 7's fit (35M-2.4B) and its checked extrapolation (Table 5)


@dataclass(frozen=True)
class LossEstimate:
    """Predicted evaluation loss (on the papers' C4 set-up) and relative to data parallelism at the
    same N and tokens; ``notes`` name every factor the tables do not cover."""

    loss: float
    relative_to_dp: float
    notes: tuple[str, ...]
    measured: bool = False  # from a quality profile, not the tables


def power_law(law: tuple[float, float], parameters: float) -> float:
    scale, exponent = law
    return scale * parameters**exponent


def data_parallel_loss(parameters: float) -> float:
    return power_law(DATA_PARALLEL_LAW, parameters)


def irreducible_loss() -> float:
    """The floor no estimate goes below: Chinchilla's irreducible term E."""
    return CHINCHILLA["E"]


def bounded(loss: float, what: str) -> tuple[float, tuple[str, ...]]:
    """``loss``, or the irreducible loss and a note where ``what`` went below it."""
    floor = irreducible_loss()
    if loss >= floor:
        return loss, ()
    return floor, (
        f"{what} gives {loss:.3f}, below the irreducible loss E = {floor:g} "
        f"(Chinchilla's, MassiveText): clamped at E",
    )


def size_notes(parameters: float) -> tuple[str, ...]:
    low, high = FITTED_PARAMETERS
    if low <= parameters <= high:
        return ()
    return (
        f"N = {parameters:.3g}: outside the fitted {low:.3g}-{high:.3g} parameters, the laws extrapolated",
    )


def diloco_loss(parameters: float, replicas: int) -> tuple[float, tuple[str, ...]]:
    """DiLoCo at H = 30 with ``replicas`` replicas: the published law, log-interpolated in M between
    published M, extended past M = 8 with the joint exponent (and said so)."""
    published = sorted(DILOCO_LAWS)
    if replicas in DILOCO_LAWS:
        return power_law(DILOCO_LAWS[replicas], parameters), ()
    if replicas > published[-1]:
        top = published[-1]
        loss = power_law(DILOCO_LAWS[top], parameters) * (replicas / top) ** JOINT_M_EXPONENT
        return loss, (
            f"M = {replicas}: beyond the published M <= {top}, extended with the joint fit's M exponent",
        )
    low = max(m for m in published if m < replicas)
    high = min(m for m in published if m > replicas)
    weight = math.log(replicas / low) / math.log(high / low)
    log_loss = (1 - weight) * math.log(power_law(DILOCO_LAWS[low], parameters)) + weight * math.log(
        power_law(DILOCO_LAWS[high], parameters)
    )
    return math.exp(log_loss), ()


def replicas_factor(parameters: float, replicas: int) -> tuple[float, list[str]]:
    """DiLoCo's loss over DP's at H = 30 (``diloco_loss``), with the two laws taken at N but no
    further than the largest size the paper ran (module docstring), and notes."""
    checked = FITTED_PARAMETERS[1]
    at = min(parameters, checked)
    loss, notes = diloco_loss(at, replicas)
    factor = loss / data_parallel_loss(at)
    if parameters > checked:
        notes += (
            f"DiLoCo against DP held at its N = {checked:.3g} value ({100 * (factor - 1):+.2f}%), the largest "
            "size the scaling-law paper ran: its laws' ratio beyond is extrapolated",
        )
    return factor, list(notes)


def schedule_notes(declared: Schedule, schedule) -> tuple[float, list[str]]:
    """The loss factor of a DiLoCo-family schedule's fragments, overlap and update rule, and notes."""
    factor, notes = 1.0, []
    fragmented = declared.fragments(schedule) > 1
    if fragmented:
        factor *= FRAGMENTED_FACTOR
    if declared.update == EAGER:
        factor *= EAGER_FACTOR[fragmented]
    elif "overlap_steps" in declared.reads and schedule.overlap_steps > PUBLISHED_MAX_OVERLAP_STEPS:
        notes.append(
            f"tau = {schedule.overlap_steps}: beyond the published tau <= {PUBLISHED_MAX_OVERLAP_STEPS}, not priced"
        )
    if declared.update not in (AVERAGE, EAGER):
        notes.append(
            f"{declared.label}: no published loss table for its update rule; DiLoCo's used"
        )
    if schedule.compression in declared.compressions and schedule.compression != NONE:
        notes.append(
            f'compression = "{schedule.compression}" ({schedule.topk} of {schedule.chunk_values} '
            f"values at {schedule.bits} bits): not priced, the dense schedule's loss is shown"
        )
    return factor, notes


def inner_steps_factor(inner_steps: int, parameters: float) -> tuple[float, list[str]]:
    """The loss factor of H against the tables' H = 30 (module docstring), and notes."""
    if inner_steps <= PUBLISHED_H:
        return 1.0, []
    factor = 1 + H_PENALTY_PER_LOG_H * math.log(inner_steps / PUBLISHED_H)
    notes = [
        f"H = {inner_steps}: +{100 * (factor - 1):.2f}% loss against H = {PUBLISHED_H}, from DiLoCo's "
        f"150M run (+2.9% perplexity from H = 50 to 1000)"
    ]
    if parameters > 2 * H_MEASURED_PARAMETERS:
        notes[0] += "; larger models lose less to H (a figure only): an upper bound here"
    if inner_steps > H_PUBLISHED_MAX:
        notes.append(
            f"H = {inner_steps}: beyond the published H <= {H_PUBLISHED_MAX}, extended log-linearly"
        )
    return factor, notes


def estimate(
    scenario, algorithm: str | None = None, profile: QualityProfile | None = None
) -> LossEstimate:
    """The estimate for ``scenario`` under ``algorithm`` (default: its own schedule.algorithm): the
    measured ``profile``'s penalty where it has points for this setting, else the prior; never below
    the irreducible loss (``bounded``), sizes outside the fitted range marked."""
    name = algorithm or scenario.schedule.algorithm
    declared = SCHEDULES[name]
    parameters = scenario.model.parameters
    law_baseline = data_parallel_loss(parameters)
    baseline, floor_notes = bounded(law_baseline, "DDP's power law")
    marks = (*size_notes(parameters), *floor_notes)
    if declared.exchanged == GRADIENT:
        return LossEstimate(baseline, 0.0, marks)
    schedule = scenario.schedule
    if profile is not None and schedule.compression == NONE:  # a profile measures dense exchanges
        measured = profile.relative_to_dp(
            name,
            schedule.inner_steps,
            scenario.worker_count,
            schedule.bits,
            declared.fragments(schedule),
        )
        if measured is not None:
            relative, measured_notes = measured
            where = (
                f"measured on {profile.scenario}'s model ({profile.model_parameters:,} parameters)"
            )
            if not 0.5 <= parameters / profile.model_parameters <= 2:
                where += (
                    f", applied at {parameters:.3g}: the scaling-law tables show the penalty "
                    "shrinking as N grows"
                )
            return finished(
                baseline, baseline * (1 + relative), (where, *measured_notes, *marks), measured=True
            )
    m_factor, replica_notes = replicas_factor(parameters, scenario.worker_count)
    factor, notes = schedule_notes(declared, schedule)
    if "inner_steps" in declared.reads:
        h_factor, h_notes = inner_steps_factor(schedule.inner_steps, parameters)
        factor *= h_factor
        notes += h_notes
    fallback = (
        [
            f"the profile has no point for {name}, {schedule.bits} bits, {declared.fragments(schedule)} "
            "fragments: the prior used"
        ]
        if profile is not None and schedule.compression == NONE
        else []
    )
    return finished(
        baseline, baseline * m_factor * factor, (*fallback, *replica_notes, *notes, *marks)
    )


def finished(
    baseline: float, loss: float, notes: tuple[str, ...], measured: bool = False
) -> LossEstimate:
    """The estimate with its loss (DDP's ``baseline``, clamped, times the schedule's 1 + p) bounded
    below: only a schedule better than DDP at the floor is clamped (a note where it was)."""
    loss, floor_notes = bounded(
        loss, f"DDP's {baseline:.3f} x ({100 * (loss / baseline - 1):+.2f}%)"
    )
    notes = tuple(dict.fromkeys((*notes, *floor_notes)))
    return LossEstimate(loss, loss / baseline - 1, notes, measured)


def chinchilla_loss(parameters: float, tokens: float) -> float:
    """Hoffmann et al.'s L(N, D) (eq. 10)."""
    c = CHINCHILLA
    return c["E"] + c["A"] / parameters ** c["alpha"] + c["B"] / tokens ** c["beta"]


def extra_tokens_factor(
    parameters: float, relative_to_dp: float, tokens: float | None = None
) -> float:
    """D' / D: the tokens a schedule with loss (1 + p) x DDP's needs to reach DDP's loss at D =
    ``tokens`` (default the Chinchilla-optimal 20 N; module docstring); infinity where no amount of
    data reaches it."""
    if relative_to_dp == 0:
        return 1.0
    c = CHINCHILLA
    tokens = tokens or CHINCHILLA_TOKENS_PER_PARAMETER * parameters
    target = chinchilla_loss(parameters, tokens)
    data_term = target / (1 + relative_to_dp) - c["E"] - c["A"] / parameters ** c["alpha"]
    if data_term <= 0:
        return math.inf
    return (c["B"] / data_term) ** (1 / c["beta"]) / tokens
