"""Who sends a joining worker the global state (``network.weights_from``): one rule for both executors.

A worker that joins or returns downloads the global state (parameters x bytes_per_param,
``Scenario.weights_bytes``) from the *holders*: the present members that hold it (not joiners whose
own download is not in). The simulator (``simulator/events/churn.py``, and on counts
``simulator/fast/counts.py``) and the trainer (``trainer/elastic/joining.py``) choose with the
functions here, from the same inputs: each worker's access link as the scenario gives it, the one-way
latency between holder and joiner, and the downloads each holder is sending at that moment.

* ``"fastest"`` (the default): the whole state from one holder, the one that gives the joiner the
  highest rate at the moment the download starts: min(holder's uplink / (downloads it is sending + 1),
  joiner's downlink); ties go to the lower holder-to-joiner latency, then to the lower rank. Joiners
  that start together thus spread over the holders, each taking the best share left, as recovery
  spreads over healthy peers in real systems (torchft's quorum hands each recovering replica to an
  up-to-date one in turn).
* ``"striped"``: the state in equal parts, one part from every holder at once (k holders: weights / k
  from each); the download is in once its last part is.

What the choice leaves out, on purpose:

* **The ring's traffic on a holder's uplink.** A download starts only at a quiet moment, when no
  collective has formed since the last outer boundary (the trainer's holders serve between inner
  steps with no exchange in flight), so no ring crosses any uplink then; the rings that form later
  cross every holder's uplink alike, one flow each, and the choice is not revisited.
* **Backbones and TCP caps.** They bound the download's rate once it runs, as they bound any transfer,
  but the choice reads only the two access links (what both executors know of every worker).

A holder that leaves mid-way takes its downloads with it: each one it was sending (each part, striped)
starts again from the holder the rule picks then, at the next quiet moment, as the trainer's joiner
sees its connection break and asks again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

WEIGHTS_SOURCES = ("fastest", "striped")


@dataclass(frozen=True)
class Holder:
    """A holder as the rule sees it: its rank, its uplink, the downloads (or parts) it is sending now
    and the one-way latency from it to the joiner."""

    rank: int
    upload_bytes_per_s: float
    sending: int
    latency_s: float


def rate_bytes_per_s(holder: Holder, download_bytes_per_s: float) -> float:
    """The rate ``holder`` would give one more download now: its uplink's fair share with the downloads
    it sends, up to the joiner's downlink (``download_bytes_per_s``)."""
    return min(holder.upload_bytes_per_s / (holder.sending + 1), download_bytes_per_s)


def fastest(holders: Iterable[Holder], download_bytes_per_s: float) -> Holder | None:
    """The holder that gives the joiner the highest rate now (ties: the lower latency, then the lower
    rank); None where there is no holder."""
    return min(
        holders,
        key=lambda holder: (
            -rate_bytes_per_s(holder, download_bytes_per_s),
            holder.latency_s,
            holder.rank,
        ),
        default=None,
    )


def parts(weights_bytes: float, holders: int) -> list[float]:
    """``"striped"``: the bytes of each holder's part, equal (``holders`` > 0)."""
    return [weights_bytes / holders] * holders
