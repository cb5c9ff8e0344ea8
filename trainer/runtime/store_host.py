"""Host an elastic run's store on a machine that does not train, for torchrun across machines.

    python -m islands.trainer.runtime.store_host --port 29400        # on the head machine; Ctrl+C ends it

then every island's node runs ``torchrun ... --rdzv-backend=c10d --rdzv-endpoint=HEAD:29400
--max-restarts=0``: torchrun's rendezvous and the islands' membership both live in this process, so
no island's death takes the control plane with it (when torchrun's own agent hosts the store, the
island on that node is a single point of failure).
"""

from __future__ import annotations

import argparse
import signal

from .store import connect


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on")
    parser.add_argument("--port", type=int, default=29400)
    args = parser.parse_args()
    stops = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    store = connect(args.host, args.port, True, 60.0)
    print(f"islands store on {args.host}:{store.port}; Ctrl+C to stop", flush=True)
    signal.sigwait(stops)


if __name__ == "__main__":
    main()
