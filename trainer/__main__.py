"""``python -m islands.trainer``: one process of a run that a local launcher started (``launch.train``).

Its launch spec (``ISLANDS_LAUNCH``, ``runtime/spec.py``) names the plan's file, the folders and the
rest; torchrun's variables say which rank it is (none: the Decoupled DiLoCo syncer). A refusal is
one line and exit code 2, as from ``islands train``.
"""

from __future__ import annotations

import sys

from islands.errors import UserError


def main() -> int:
    from .core.checkpoint import PeerFailed
    from .launch import launched_process
    from .report import print_summary
    from .runtime.processes import distributed_env
    from .runtime.spec import launch_spec

    try:
        spec = launch_spec()
        if spec.plan_file is None:
            raise UserError(
                "python -m islands.trainer runs a process that a launcher started (ISLANDS_LAUNCH "
                "names its plan); to train, run islands train SCENARIO"
            )
        summary = launched_process(spec, distributed_env())
    except PeerFailed:
        return 2  # another process refused its checkpoint and printed the one line
    except UserError as exc:
        print(f"islands train: error: {exc}", file=sys.stderr)
        return 2
    if summary is not None:
        print_summary(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
