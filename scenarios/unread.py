"""Keys that do nothing, refused: a user who writes one believes it is modelled.

Each rule names a key that no part of a run reads given the others (as ``schedule.quorum`` on a
schedule that syncs every worker, and the ``[exchange]`` keys, ``loader.check_exchange``):

* ``mttr_s`` without ``mtbf_s``: only ``mtbf_s`` makes a worker leave at random;
* ``recovery_s`` without ``chip_mtbf_s``: only ``chip_mtbf_s`` makes a worker fail. (``chips`` is read
  without it: it is the fleet's chip count in the summary and goodput's weight of each worker);
* ``deadline_slack`` away from its default under a barrier other than ``"deadline"``;
* any ``[syncer]`` key under a coupled schedule, whose workers exchange with each other;
* an absent worker (``present = false``) that nothing ever brings in: no join event names it or its
  island, and it has no random return (``mtbf_s`` with ``mttr_s``);
* ``network.weights_from`` away from its default where no worker downloads the state from a holder:
  under Decoupled DiLoCo (a learner fetches it from the syncer), or where no worker ever joins (no
  join event, no random return, no chip failure, after which a worker joins again).
"""

from __future__ import annotations

import dataclasses

from islands.schedules import schedule_of

from .errors import ScenarioError
from .model import Scenario, SyncerSpec
from .spec import NETWORK_KEYS, SCHEDULE_KEYS


def check_unread(scenario: Scenario, source: str) -> None:
    """Every rule above, in the order the module lists them."""
    check_churn_keys(scenario, source)
    check_deadline_slack(scenario, source)
    check_syncer(scenario, source)
    check_absent_workers(scenario, source)
    check_weights_from(scenario, source)


def check_churn_keys(scenario: Scenario, source: str) -> None:
    for index, island in enumerate(scenario.islands):
        if island.mttr_s is not None and island.mtbf_s is None:
            raise ScenarioError(
                source,
                f"island.{index}.mttr_s",
                "has no effect without mtbf_s: workers leave at random only with mtbf_s (their "
                "mean time between departures), and mttr_s is how long they stay away; give "
                "mtbf_s or remove mttr_s",
            )
        if island.recovery_s is not None and island.chip_mtbf_s is None:
            raise ScenarioError(
                source,
                f"island.{index}.recovery_s",
                "has no effect without chip_mtbf_s: workers fail only with chip_mtbf_s, and "
                "recovery_s is how long a failed one takes to compute again; give chip_mtbf_s "
                "or remove recovery_s",
            )


def check_deadline_slack(scenario: Scenario, source: str) -> None:
    schedule = scenario.schedule
    default = SCHEDULE_KEYS["deadline_slack"].default
    if schedule.barrier != "deadline" and schedule.deadline_slack != default:
        raise ScenarioError(
            source,
            "schedule.deadline_slack",
            f'{schedule.deadline_slack:g} has no effect under barrier = "{schedule.barrier}": only '
            f'the "deadline" barrier sets a deadline (set barrier = "deadline", or remove it)',
        )


def check_syncer(scenario: Scenario, source: str) -> None:
    if not schedule_of(scenario).coupled:
        return
    given = [
        field.name
        for field in dataclasses.fields(SyncerSpec)
        if getattr(scenario.syncer, field.name) != field.default
    ]
    if given:
        raise ScenarioError(
            source,
            f"syncer.{given[0]}",
            f'has no effect: algorithm = "{scenario.schedule.algorithm}" has no syncer (its workers '
            "exchange with each other); the syncer is Decoupled DiLoCo's: remove [syncer]",
        )


def check_absent_workers(scenario: Scenario, source: str) -> None:
    joined = {event.island for event in scenario.events if event.kind == "join"}
    index_of = {island.name: index for index, island in enumerate(scenario.islands)}
    for worker in scenario.workers():
        if worker.present or worker.mttr_s is not None or {worker.name, worker.island} & joined:
            continue
        raise ScenarioError(
            source,
            f"island.{index_of[worker.island]}.present",
            f"false, and nothing ever brings worker '{worker.name}' in: add an [[event]] with "
            f'kind = "join" and island = "{worker.name}", give mtbf_s and mttr_s (a random '
            "return), or set present = true",
        )


def check_weights_from(scenario: Scenario, source: str) -> None:
    chosen = scenario.network.weights_from
    if chosen == NETWORK_KEYS["weights_from"].default:
        return
    if not schedule_of(scenario).coupled:
        why = (
            f'algorithm = "{scenario.schedule.algorithm}": a learner that joins fetches the state '
            "from the syncer"
        )
    elif not any(event.kind == "join" for event in scenario.events) and not any(
        island.mttr_s is not None or island.chip_mtbf_s is not None for island in scenario.islands
    ):
        why = "no worker ever joins (no join event, no mttr_s, no chip_mtbf_s)"
    else:
        return
    raise ScenarioError(
        source,
        "network.weights_from",
        f"{chosen!r} has no effect: {why}; remove it",
    )
