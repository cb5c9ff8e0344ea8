"""A torchtitan training log (its console output) as a per-step log (``steps``).

torchtitan's ``MetricsProcessor.log`` writes one line at step 1 and every ``metrics.log_freq`` steps:
``step: 10  loss:  7.1234  grad_norm: ...  memory: 12.30GiB(15.60%)  tps: 1,234  tflops: 56.70
mfu: 12.30%``, through a logger whose format opens each line with the time
(``[titan] 2025-01-22 10:32:15,123 - root - INFO - ``), and under torchrun with the rank
(``[rank0]:``). Its ``tps`` is tokens per second, not a step time, and its end-to-end step time goes
to TensorBoard or W&B only; so the step time read here is the time between two logged step lines
over the steps between them: steps 11-20 took (t(20) - t(10)) / 10 each. The first logged line
only opens the window. Colour codes are read past; ``validate step:`` lines are not steps. The line
gives no compute or communication split and no sync, so only the step time is compared.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from pathlib import Path

from islands.errors import UserError

from .steps import MAX_STEP, StepLog, checked, log_frame, read_text

STEP_LINE = re.compile(r"(?<!validate )\bstep:\s*(\d+)\s+loss:")
TIME_STAMP = re.compile(r"(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)")
RANK = re.compile(r"^\[rank(\d+)\]:")
COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def line_time_s(line: str, where: str) -> float:
    stamp = TIME_STAMP.search(line)
    if stamp is None:
        raise UserError(
            f"{where}: a step line with no time stamp (torchtitan's logger opens each line with one, "
            "[titan] YYYY-MM-DD HH:MM:SS,mmm): the step time is read from them"
        )
    try:
        return datetime.fromisoformat(stamp.group(1).replace(",", ".")).timestamp()
    except ValueError as error:
        raise UserError(f"{where}: time stamp {stamp.group(1)}: {error}") from None


def read_torchtitan(path: Path) -> StepLog:
    logged: dict[int, list[tuple[int, float, str]]] = {}
    names_ranks = False
    for number, raw in enumerate(read_text(path).splitlines(), start=1):
        line = COLOUR.sub("", raw)
        matched = STEP_LINE.search(line)
        if matched is None:
            continue
        where = f"{path}: line {number}"
        step = int(matched.group(1))
        if not 1 <= step < MAX_STEP:
            raise UserError(f"{where}: step must be 1 to {MAX_STEP - 1} (got {step})")
        rank = RANK.match(line)
        names_ranks = names_ranks or rank is not None
        logged.setdefault(int(rank.group(1)) if rank else 0, []).append(
            (step, line_time_s(line, where), where)
        )
    if not logged:
        raise UserError(f"{path}: no 'step: N  loss:' lines: not a torchtitan log")
    records = []
    for rank_number, lines in logged.items():
        if len(lines) < 2:
            raise UserError(
                f"{path}: one step line (step {lines[0][0]}) for rank {rank_number}: the step time is "
                "the time between two logged steps (torchtitan logs step 1 and every metrics.log_freq "
                "steps)"
            )
        records += spans(rank_number, lines)
    notes = [
        "torchtitan's log gives the wall time between logged steps only: no compute, communication or sync "
        "(log per-step rows for those)"
    ]
    return checked(StepLog(path, "torchtitan", log_frame(records), names_ranks, notes))


def spans(rank: int, lines: list[tuple[int, float, str]]) -> list[dict]:
    """The steps between each two logged lines of one rank, with their wall seconds."""
    records = []
    for (before, before_s, _), (step, time_s, where) in zip(lines, lines[1:]):
        if step <= before:
            what = "twice" if step == before else "out of order"
            raise UserError(
                f"{where}: step {step} after step {before}: steps {what} (a restarted run? give one "
                "run's log)"
            )
        if time_s < before_s:
            raise UserError(
                f"{where}: its time stamp is before the previous step line's: the clock goes forward"
            )
        records.append(
            {
                "rank": rank,
                "step": step,
                "steps": step - before,
                "wall_s": time_s - before_s,
                "compute_s": math.nan,
                "blocked_s": math.nan,
                "synced": math.nan,
                "bytes": math.nan,
                "where": where,
            }
        )
    return records
