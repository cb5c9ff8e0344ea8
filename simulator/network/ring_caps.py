"""How fast a ring may go below its links: TCP's caps, a measured ring efficiency, or one FIFO per
island's egress (``network.egress_queue = "fifo"``, the model in ``scenarios/fifo.py``).

Under fair queues (the default) a ring is capped by TCP (``NetworkSpec.tcp_cap_bytes_per_s`` at its
slowest hop's round trip) and, where given, by ``network.ring_efficiency`` of its slowest link: what
it was before the FIFO was priced, bit for bit.

Under one FIFO per egress every member sends and receives at once, and the ACKs of its downloads
wait behind its uploads (docs/emulation.md, "One FIFO per egress"). The ring is charged twice for it:

* **its rate**: at most e(u) x u, with u the slowest member's uplink (its egress) and e the model's
  efficiency there (``Fifo.efficiency``). e(u) x u grows with u (e never falls as the rate grows), so
  the slowest egress gives the least; the ring is paced by its slowest link anyway, and this share
  was fitted on equal links. A faster downlink or backbone elsewhere in the ring changes nothing; a
  slower one binds below this cap as before;
* **unequal links** (a ring collective among three or more): at most min_k e_k x member k's narrowest
  link, e_k = 1 / (1 + k_u u(rho_k)), u = min(1, ln rho_k / ln 2) (k_u: ``network.fifo_k_u``, else
  the fit), rho_k the upload feeding k's download over it: around the ring its predecessor's, in an
  all-reduce whose first pass is an all-to-all (``network.reduce_scatter = "all_to_all"``, the
  trainer's) the fastest other member's (``scenarios/fifo.py``, "Unequal links": the feeding sender
  keeps k's download FIFO standing, the ACKs of k's uploads wait behind it and its uplink idles).
  Equal links, and two members, are not charged (inf);
* **its round trip**: each connection's RTT grows by d, the ACKs' wait behind the receiver's uploads
  (``Fifo.ack_wait_s`` at that slowest egress, where it is longest), so TCP's window and loss caps are
  taken at 2 x the hop's one-way latency + d.

d is not added to each ring step's latency: a step ends when its bytes have arrived, and the data do
not wait behind ACKs, only the ACKs behind data. The emulation says so: gloo's all-reduce of 1.5 s of
bytes among 4 islands at 10 Mbit/s (6 ring steps, d = 7.3 ms) took the same time behind a FIFO as
under fair queues (0.999-1.003 of fair, CUBIC), where 6 x d would have made it 0.972.

A measured ``ring_efficiency`` is refused beside a FIFO (``scenarios.fifo.check_fifo``): measured
through one, it holds the FIFO's cost, which the model would charge again; ``islands calibrate
--egress-queue fifo`` turns such a measurement into ``fifo_k_s`` instead.
"""

from __future__ import annotations

import numpy as np

from islands.scenarios.fifo import ALL_TO_ALL, FIFO, UNEQUAL_MIN_MEMBERS, Fifo, unequal_k
from islands.scenarios.fifo import unequal_cap_bytes_per_s as unequal_cap
from islands.scenarios.model import NetworkSpec

from .links import CAPACITY, Link
from .topology import Topology


def ring_cap_bytes_per_s(
    network: NetworkSpec,
    topology: Topology,
    participants: tuple[int, ...],
    links: tuple[Link, ...],
    hop_s: float,
    counts: tuple[int, ...] = (),
    reduces: bool = False,
) -> float:
    """The most a ring over ``participants`` (crossing ``links``, its slowest hop ``hop_s`` one way;
    each standing for ``counts`` workers, one each where empty) carries per link: the module's
    docstring. ``reduces``: the collective is an all-reduce, whose first pass may be an all-to-all
    (``network.reduce_scatter``), fed on unequal links by the fastest other member, not the
    predecessor."""
    if network.egress_queue == FIFO:
        egress = slowest_egress_bytes_per_s(topology, participants)
        cap_bytes_per_s = fifo_cap_bytes_per_s(network, egress, hop_s)
        members = sum(counts) if counts else len(participants)
        if members < UNEQUAL_MIN_MEMBERS:
            return cap_bytes_per_s
        around_ring = not (reduces and network.reduce_scatter == ALL_TO_ALL)
        k_u = unequal_k(network)
        unequal = unequal_cap_bytes_per_s(topology, participants, k_u, around_ring, counts)
        return min(cap_bytes_per_s, unequal)
    cap_bytes_per_s = network.tcp_cap_bytes_per_s(hop_s)
    if network.ring_efficiency < 1:
        slowest = min(map(CAPACITY, links))
        cap_bytes_per_s = min(cap_bytes_per_s, network.ring_efficiency * slowest)
    return cap_bytes_per_s


def fifo_cap_bytes_per_s(network: NetworkSpec, egress_bytes_per_s: float, hop_s: float) -> float:
    """Under one FIFO per egress, a ring whose slowest egress is ``egress_bytes_per_s``: its share of
    that egress, and TCP's caps at the hop's round trip plus the ACKs' wait (also ``budget``'s)."""
    fifo = Fifo.of(network)
    return min(
        network.tcp_cap_bytes_per_s(hop_s, fifo.ack_wait_s(egress_bytes_per_s)),
        fifo.efficiency(egress_bytes_per_s) * egress_bytes_per_s,
    )


def unequal_cap_bytes_per_s(
    topology: Topology,
    participants: tuple[int, ...],
    k_u: float,
    around_ring: bool,
    counts: tuple[int, ...] = (),
) -> float:
    """``scenarios.fifo.unequal_cap_bytes_per_s`` of the ring's members (over arrays: a ring of
    thousands at once); a participant standing for several workers has copies among the others."""
    ranks = np.fromiter(participants, np.intp, len(participants))
    several = np.array([count > 1 for count in counts]) if counts else np.zeros(len(ranks), bool)
    arrays = topology.arrays
    return unequal_cap(
        arrays.up_capacity[ranks], arrays.down_capacity[ranks], several, k_u, around_ring
    )


def slowest_egress_bytes_per_s(topology: Topology, participants: tuple[int, ...]) -> float:
    """The slowest uplink among ``participants`` (over arrays: a ring of thousands at once)."""
    ranks = np.fromiter(participants, np.intp, len(participants))
    return float(topology.arrays.up_capacity[ranks].min())
