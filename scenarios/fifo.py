"""One FIFO queue per island's egress (``network.egress_queue = "fifo"``): what it does to a ring's
rate, and its keys refused where they do nothing. Where the simulator charges it is
``simulator/network/ring_caps.py``'s; the measurements are docs/emulation.md's "One FIFO per egress".

In a ring every island sends and receives at once. Behind one FIFO on its egress (``tc tbf`` on a
host, a cloud shaper) the ACKs of its downloads wait behind its uploads: each connection's round trip
grows by the island's standing queue, d. Under fair queues (ACKs first, a queue per peer: fq_codel,
cake, htb) they do not wait. Relative to fair queues on the same link, the ring's bytes take

    T_fifo / T_fair = 1 + s x c x (k_s + k_so x o)         (its rate is the inverse)

    s = sqrt(F x 10 Mbit/s / r)         the flows through the egress over its rate
    c = min(1, 64 KiB / (g x r))        the standing packets' share left once they stop growing
    o = max(0, 1 - Q / D)               the share of the flows' standing packets the FIFO cannot hold
    D = F x 2 x min(g x r, 64 KiB) / r  what the F flows keep standing in the FIFO, in seconds
    d = min(Q, D)                       the ACKs' wait behind the uploads (each connection's round trip)

with r the egress rate, F the TCP flows each island sends through it at once (``network.streams``:
gloo's ring 1; NCCL channels x ``NCCL_NSOCKS_PERTHREAD`` x ``NCCL_SOCKET_NTHREADS``), Q the FIFO's
depth in seconds (``network.fifo_queue_ms``: tbf's ``latency``) and g the seconds of the link's rate
in one GSO packet (``GSO_S``). TCP small queues let each socket keep about two GSO packets in the
qdisc, measured here at 7.3-8.2 ms of the link's rate per flow at 10 and 50 Mbit/s whatever the
flows (g = 4 ms), and at 5.5 ms at 200 Mbit/s: two packets of 64 KiB, the kernel's largest. Above
r = 64 KiB / g (131 Mbit/s) the standing queue, and the ACKs' wait, shrink as 1 / r: c.

The cost is a stretch of the bytes' time rather than a share taken off the rate (1 - ...): the two
agree to first order where the cost is small, as in every measured cell, and the stretch keeps the
rate above 0 however few the bits per flow. k_s and k_so are fitted per TCP congestion control
(``FITTED``: ``benchmarks/fifo_model.py`` on the emulation's 81 cells each, residual rms 1.2 points
with CUBIC and 4.0 with BBR, ``benchmarks/results/fifo-model-fit.md``) or given (``network.fifo_k_s``,
``network.fifo_k_so``); ``islands calibrate --egress-queue fifo`` fits k_s from a user's nccl-tests
and iperf3 files at one rate (``fitted_k_s``). The emulation gives the mechanism and the shape, not
the size on real hosts: issue 44's GPU runs needed k_s = 0.59 at one flow (calibrated at 50 Mbit/s,
the model then gave 0.920, 0.992 and 0.999 of the link at 200, 1,000 and 5,000 Mbit/s where they got
0.90, 0.99-1.00 and 0.99-1.00; without c, 0.883, 0.944 and 0.974).

**Unequal links** (docs/emulation.md, "Unequal links behind one FIFO"). Where the upload of a
member that sends to a member is faster than that member's download, the download has a FIFO of its
own (an ISP's downstream shaper, the emulation's ``_shapes_download``), and the faster sender's TCP
keeps it standing (10-75 ms measured, whatever its depth). The ACKs of the member's own uploads come
back through it and its uplink idles part of each exchange (its egress queue empties): around a
ring as well as in the trainer's all-to-all. Its share of its own link, M >= 3:

    e_k = 1 / (1 + k_u x u(rho_k))       u = min(1, ln(rho_k) / ln 2), 0 where rho_k <= 1

rho_k the feeding upload over k's download: around a ring (NCCL's, gloo's all-reduce, any ring
all-gather) its predecessor's; in an all-to-all (the trainer's all-reduce, whose first pass is one:
``network.reduce_scatter = "all_to_all"``) the fastest other member's. The loss rises with rho to
about rho = 2 and no further (1.44 lost 0.12, 2.25-8 lost 0.11-0.29 alike: the queue is the faster
sender's window, not the ratio). Two members lost 0.015 at most (one connection each way carries
every step): not charged. The ring moves at most min_k e_k x its narrowest link
(``simulator/network/ring_caps.py``). k_u = ``K_UNEQUAL`` (or ``network.fifo_k_u``) is the least
squares of T_fifo / T_fair - 1 = k_u u on a long run's exchanges from fresh connections, past their
first five (``benchmarks/fifo_model.py unequal``, CUBIC, ``benchmarks/results/fifo-unequal-fit.md``):
a run's first exchanges lose from a fifth (connections earlier traffic had opened wide) to six times
(fresh ones) as much.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from islands.schedules import schedule_of
from islands.units import BITS_PER_BYTE, MS_PER_S

from .errors import ScenarioError
from .model import NetworkSpec, Scenario
from .spec import EGRESS_QUEUES, REDUCE_SCATTERS

FAIR, FIFO = EGRESS_QUEUES
ALL_TO_ALL, _ = REDUCE_SCATTERS
R_REF_BYTES_PER_S = 10e6 / BITS_PER_BYTE  # s's reference rate: 10 Mbit/s
GSO_S = 0.004  # a GSO packet, in seconds of the link's rate, below the kernel's largest
GSO_MAX_BYTES = 65536.0  # the kernel's largest GSO packet (gso_max_size)
PACKETS_STANDING = 2  # per socket, what TCP small queues let it keep in the qdisc
# (k_s, k_so) by TCP congestion control: least squares of T_fifo / T_fair - 1 on the emulation's cells
FITTED = {"cubic": (0.0052, 0.0280), "bbr": (0.0323, 0.0544)}
# k_u of unequal links (the module's docstring): least squares of T_fifo / T_fair - 1 = k_u u(rho)
# on the emulation's 13 charged series of benchmarks/results/fifo-unequal-series.json (12-30
# exchanges each after 1 s idle from fresh connections, exchanges 6 on; the trainer's all-to-all and
# gloo's ring, M = 3 and 4, rho 1.1-8, 10 and 40 Mbit/s, FIFO 200 ms, CUBIC), residual rms 4.5 points
K_UNEQUAL = 0.175
RHO_FULL = 2.0  # the ratio from which the whole loss is measured, ln-rising to it from 1
# Two members use one connection each way for every step, whose window grows to cover the ACKs'
# wait: at most 0.015 lost (benchmarks/fifo_exchange.py, M = 2, links 2:1 to 8:1, gloo's ring at 4:1)
UNEQUAL_MIN_MEMBERS = 3


@dataclass(frozen=True)
class Fifo:
    """The model's inputs that do not change from link to link: flows, depth and coefficients."""

    flows: int
    queue_s: float
    k_s: float
    k_so: float

    @classmethod
    def of(cls, network: NetworkSpec) -> Fifo:
        k_s, k_so = coefficients(network)
        return cls(network.streams, network.fifo_queue_ms / MS_PER_S, k_s, k_so)

    def standing_s(self, rate_bytes_per_s: float) -> float:
        """D: the flows' standing packets in the FIFO, in seconds of its rate."""
        per_flow_bytes = PACKETS_STANDING * min(GSO_S * rate_bytes_per_s, GSO_MAX_BYTES)
        return self.flows * per_flow_bytes / rate_bytes_per_s

    def ack_wait_s(self, rate_bytes_per_s: float) -> float:
        """d = min(Q, D): how long an ACK of the island's downloads waits behind its uploads."""
        return min(self.queue_s, self.standing_s(rate_bytes_per_s))

    def overflow(self, rate_bytes_per_s: float) -> float:
        """o: the share of the standing packets the FIFO cannot hold (tail drops, each a window cut)."""
        return max(0.0, 1.0 - self.queue_s / self.standing_s(rate_bytes_per_s))

    def scale(self, rate_bytes_per_s: float) -> float:
        """s x c: the flows over the rate, times the standing packets' share left at that rate."""
        shrink = min(1.0, GSO_MAX_BYTES / (GSO_S * rate_bytes_per_s))
        return math.sqrt(self.flows * R_REF_BYTES_PER_S / rate_bytes_per_s) * shrink

    def stretch(self, rate_bytes_per_s: float) -> float:
        """T_fifo / T_fair - 1 at an egress of ``rate_bytes_per_s``."""
        return self.scale(rate_bytes_per_s) * (
            self.k_s + self.k_so * self.overflow(rate_bytes_per_s)
        )

    def efficiency(self, rate_bytes_per_s: float) -> float:
        """T_fair / T_fifo: the share of its rate an egress of ``rate_bytes_per_s`` gives a ring, in
        (0, 1]; never falling as the rate or the depth grow."""
        return 1.0 / (1.0 + self.stretch(rate_bytes_per_s))


def unequal_k(network: NetworkSpec) -> float:
    """k_u: the scenario's own (``network.fifo_k_u``), else the emulation's fit ``K_UNEQUAL``."""
    return K_UNEQUAL if network.fifo_k_u is None else network.fifo_k_u


def unequal_shares(
    feeding_bytes_per_s: np.ndarray, download_bytes_per_s: np.ndarray, k_u: float
) -> np.ndarray:
    """e_k of each member of a ring collective (the module's docstring): the share of its link it
    keeps where the upload of a member that sends to it (``feeding_bytes_per_s``) fills its
    download's FIFO, in (0, 1]: 1 / (1 + k_u x u(rho_k)) (``unequal_terms``: u rises from 0 at
    rho = 1 to 1 at ``RHO_FULL`` and stays there, the standing queue being the faster sender's
    window, not the ratio); 1 where no such upload is faster than its download, or k_u is 0."""
    return 1.0 / (1.0 + k_u * unequal_terms(feeding_bytes_per_s, download_bytes_per_s))


def unequal_terms(feeding_bytes_per_s: np.ndarray, download_bytes_per_s: np.ndarray) -> np.ndarray:
    """u(rho_k) = min(1, ln(rho_k) / ln(``RHO_FULL``)), 0 where rho_k <= 1: each member's stretch per
    unit of k_u, rho_k the upload feeding its download over that download."""
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = np.nan_to_num(feeding_bytes_per_s / download_bytes_per_s, nan=1.0)
        return np.clip(np.log(rho) / math.log(RHO_FULL), 0.0, 1.0)


def feeding_bytes_per_s(
    up_bytes_per_s: np.ndarray, several: np.ndarray, around_ring: bool
) -> np.ndarray:
    """Each member's fastest sender's upload: around a ring (``around_ring``), its predecessor's (the
    members in ring order); in an all-to-all, every other member's, the fastest. A member standing
    for several workers is also fed by its own copies."""
    own = np.where(several, up_bytes_per_s, 0.0)
    if around_ring:
        return np.maximum(np.roll(up_bytes_per_s, 1), own)
    ordered = np.sort(up_bytes_per_s)
    second = ordered[-2] if len(ordered) > 1 else 0.0
    fastest_other = np.where(up_bytes_per_s == ordered[-1], second, ordered[-1])
    return np.maximum(fastest_other, own)


def unequal_cap_bytes_per_s(
    up_bytes_per_s: np.ndarray,
    down_bytes_per_s: np.ndarray,
    several: np.ndarray,
    k_u: float,
    around_ring: bool,
) -> float:
    """min over a ring collective's members (in ring order) of e_k x its narrowest link
    (``unequal_shares``), each member's uplink and downlink given, and whether it stands for several
    workers; ``around_ring``: each sends to its successor only (a ring all-reduce or all-gather), else
    to every other member (an all-to-all). inf where no member's download is slower than the upload
    feeding it."""
    feeding = feeding_bytes_per_s(up_bytes_per_s, several, around_ring)
    shares = unequal_shares(feeding, down_bytes_per_s, k_u)
    charged = shares < 1.0
    if not charged.any():
        return math.inf
    narrowest = np.minimum(up_bytes_per_s, down_bytes_per_s)
    return float((narrowest[charged] * shares[charged]).min())


def coefficients(network: NetworkSpec) -> tuple[float, float]:
    """(k_s, k_so): the scenario's own, else the fit for its TCP congestion control."""
    fitted_s, fitted_so = FITTED[network.tcp_congestion_control]
    return (
        fitted_s if network.fifo_k_s is None else network.fifo_k_s,
        fitted_so if network.fifo_k_so is None else network.fifo_k_so,
    )


def fitted_k_s(efficiency: float, rate_bytes_per_s: float, fifo: Fifo) -> float:
    """The k_s that makes ``fifo``'s efficiency at ``rate_bytes_per_s`` the measured ``efficiency``
    (its k_so kept): (1 / e - 1) / (s x c) - k_so x o, at least 0 (an efficiency of 1 or more: no
    cost left for k_s)."""
    stretch = 1.0 / efficiency - 1.0
    return max(
        0.0, stretch / fifo.scale(rate_bytes_per_s) - fifo.k_so * fifo.overflow(rate_bytes_per_s)
    )


def fitted_k_u(
    up_bytes_per_s: np.ndarray, down_bytes_per_s: np.ndarray, ring_bytes_per_s: float
) -> float | None:
    """The k_u a ring around members with these links (in ring order) measured, where they are
    unequal: the largest, at most ``K_UNEQUAL``, at which its unequal links' cap still carries the
    measured ``ring_bytes_per_s`` (each charged member: k <= (narrowest / ring - 1) / u); None where
    the ring charges none of them (equal links, fewer than three) or the fit already carries it."""
    if len(up_bytes_per_s) < UNEQUAL_MIN_MEMBERS:
        return None
    feeding = feeding_bytes_per_s(up_bytes_per_s, np.zeros(len(up_bytes_per_s), bool), True)
    terms = unequal_terms(feeding, down_bytes_per_s)
    charged = terms > 0
    if not charged.any():
        return None
    narrowest = np.minimum(up_bytes_per_s, down_bytes_per_s)[charged]
    carried = float(((narrowest / ring_bytes_per_s - 1.0) / terms[charged]).min())
    return max(0.0, carried) if carried < K_UNEQUAL else None


FIFO_ONLY = ("fifo_queue_ms", "tcp_congestion_control", "fifo_k_s", "fifo_k_so", "fifo_k_u")


def check_fifo(scenario: Scenario, source: str) -> None:
    """The FIFO's keys refused where they do nothing (under fair queues; the congestion control with
    both coefficients given), and a FIFO where it prices nothing the run does or would be charged
    twice: without a ring collective, or beside a measured ``network.ring_efficiency``."""
    network = scenario.network
    defaults = {field.name: field.default for field in dataclasses.fields(NetworkSpec)}
    if network.egress_queue == FAIR:
        given = [key for key in FIFO_ONLY if getattr(network, key) != defaults[key]]
        if given:
            raise ScenarioError(
                source,
                f"network.{given[0]}",
                'has no effect under egress_queue = "fair": it prices one FIFO per egress (set '
                'egress_queue = "fifo", or remove it)',
            )
        return
    if (
        network.fifo_k_s is not None
        and network.fifo_k_so is not None
        and network.tcp_congestion_control != defaults["tcp_congestion_control"]
    ):
        raise ScenarioError(
            source,
            "network.tcp_congestion_control",
            "has no effect: fifo_k_s and fifo_k_so are both given, and it only picks their fitted "
            "values (remove it, or one of them)",
        )
    unpriced = fifo_unpriced(scenario)
    if unpriced:
        raise ScenarioError(
            source,
            "network.egress_queue",
            f'"fifo" prices ring collectives, in which every worker sends and receives at once; '
            f"{unpriced}",
        )
    if network.ring_efficiency < 1:
        raise ScenarioError(
            source,
            "network.ring_efficiency",
            f'{network.ring_efficiency:g} with egress_queue = "fifo" charges the FIFO twice (an '
            "efficiency measured through it holds its cost): give fifo_k_s instead (islands "
            "calibrate --egress-queue fifo fits it from the same files), or remove one",
        )


def fifo_unpriced(scenario: Scenario) -> str | None:
    """Why the scenario's exchanges are not ring collectives the FIFO prices, or None."""
    network = scenario.network
    if not schedule_of(scenario).coupled:
        return (
            f'algorithm = "{scenario.schedule.algorithm}" has none (its learners\' round trips to '
            "the syncer): remove it"
        )
    for key in ("collective", "gather"):
        shape = getattr(network, key)
        if shape != "ring":
            return f'network.{key} = "{shape}" is not priced by it: use {key} = "ring" or remove it'
    return None
