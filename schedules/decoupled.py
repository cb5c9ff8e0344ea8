"""Decoupled DiLoCo: learners on their own clocks and a syncer that merges what has arrived
(Douillard et al. 2026, "Decoupled DiLoCo for Resilient Distributed Pre-training", arXiv:2604.21428).

Each worker is a learner. It trains H inner steps per outer step and, as Streaming DiLoCo does,
sends fragment p's pseudo-gradient tau steps before its due step t * H + (p + 1) * H / P. The
exchange is not a collective among learners: the learner uploads its fragment to the syncer (a CPU
process with its own link, ``[syncer]``) and downloads the syncer's current global fragment, which
it must hold by the due step. The syncer merges a fragment's round once ``schedule.quorum``
learners (K) have reported it, then waits at most a grace window for more (``"adaptive"``: the
paper's slack rule, ``simulator/events/syncer.py``; or seconds). A report whose round is merged already is
answered at once with the newest global fragment and joins the next merge, so a learner waits only
for K - 1 others of its own round, and with K = 1 for none; a learner that is down weighs zero, and
one whose last report is answered sends nothing more: once every live learner has a report waiting,
the syncer merges what it holds, below the quorum if need be (``no_report_can_arrive``). The rules:
``docs/decoupled.md``. A learner that comes back has stale state and fetches the global model.

The merge weights a learner's pseudo-gradient by its tokens processed times its tokens per step
(the paper's token weighting), optionally with radial-directional averaging
(``trainer.aggregation``, ``trainer/decoupled/merge.py``); the simulator prices only when bytes move and who
waits. Both executors take the grace window from ``grace_window_s``.
"""

from __future__ import annotations

from .base import ADOPT, SYNCER
from .compression import NONE
from .streaming import Streaming

ADAPTIVE = "adaptive"  # schedule.grace_window's rule
ADAPTIVE_GRACE_FRACTION = 0.5  # gamma of eq. 3; the paper does not publish its value


def grace_window_s(window: float | str, first_slack_s: float) -> float:
    """How long the syncer waits for more reports once the quorum is in: ``window`` seconds, or
    (``"adaptive"``, Douillard et al. 2026, eq. 3) gamma times the first reporter's slack, the time
    it has left before it needs the fragment back: tau steps of its compute since it sent, less the
    time since then and less its download."""
    if window != ADAPTIVE:
        return float(window)
    return max(0.0, ADAPTIVE_GRACE_FRACTION * first_slack_s)


def no_report_can_arrive(live: set[int], queued: set[int]) -> bool:
    """Whether the syncer should merge what it holds now: every live learner (present, its last
    report not yet answered) has a report waiting at the syncer. A learner's exchanges run one at a
    time, so it sends no other report until that one is answered; waiting on for the quorum would
    wait for ever. Both executors apply this rule (``docs/decoupled.md``)."""
    return live <= queued


class Decoupled(Streaming):
    """Streaming DiLoCo's fragment timing (its ``sync_steps``), each exchange a round trip to the
    syncer; a learner overwrites its local fragment with the global one it takes back."""

    name = "decoupled"
    label = "Decoupled DiLoCo"
    coupled = False
    update = ADOPT
    aggregations = ("mean", "radial_directional")
    compressions = (NONE,)  # a learner's round trip to the syncer carries its fragment dense
    reads = (
        "inner_steps",
        "fragments",
        "overlap_steps",
        "backward_overlap",
        "quorum",
        "grace_window",
    )

    def collective(self, scenario) -> str:
        """Every exchange is a round trip to the syncer, whatever the merge rule."""
        return SYNCER

    def merge_alpha(self, scenario) -> float:
        return 0.0

    def transfers_may_overlap(self, schedule) -> bool:
        return True

    def check_overlap(self, schedule) -> tuple[str, str] | None:
        """tau < H, not H / P: tau may pass the next fragment's launch (the paper's tau = 2 with one
        fragment per step); a fragment need only be due before it is sent again."""
        h, tau = schedule.inner_steps, schedule.overlap_steps
        if tau >= h:
            return (
                "schedule.overlap_steps",
                f"must be below inner_steps = {h} (a fragment is due before it is sent again; got {tau})",
            )
        return None
