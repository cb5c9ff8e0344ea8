"""Measure what a shaped link really achieves: one TCP transfer between two islands' namespaces.

``measure_link(wan, i, j, payload_bytes)`` starts a receiver inside island j's namespace and a sender
inside island i's; the sender times from its first byte to the receiver's acknowledgement that every
byte arrived, so the rate is end-to-end payload (goodput), below the configured link-layer rate by
the TCP/IP and Ethernet headers (about 4.4% at MTU 1500) and above it by the tbf burst.

Run as a module it is that receiver or sender:

    python -m islands.emulation.link_probe receive ADDRESS          # prints its port, then the count
    python -m islands.emulation.link_probe send ADDRESS PORT BYTES  # prints the seconds it took
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from islands.errors import UserError
from islands.units import BITS_PER_BYTE

if TYPE_CHECKING:
    from .wan import EmulatedWAN

CHUNK_BYTES = 1 << 20
TIMEOUT_S = 120.0


def receive(address: str) -> None:
    """Accept one connection, count its bytes until EOF, acknowledge the count."""
    with socket.create_server((address, 0)) as server:
        print(server.getsockname()[1], flush=True)
        connection, _ = server.accept()
        with connection:
            received_bytes = 0
            while chunk := connection.recv(CHUNK_BYTES):
                received_bytes += len(chunk)
            connection.sendall(str(received_bytes).encode())
    print(received_bytes, flush=True)


def send(address: str, port: int, payload_bytes: int) -> None:
    """Send the payload, wait for the receiver's count, print the seconds from first byte to that."""
    payload = bytes(payload_bytes)
    with socket.create_connection((address, port), timeout=TIMEOUT_S) as connection:
        start_s = time.perf_counter()
        connection.sendall(payload)
        connection.shutdown(socket.SHUT_WR)
        acknowledged = int(connection.recv(64))
        elapsed_s = time.perf_counter() - start_s
    if acknowledged != payload_bytes:
        raise SystemExit(f"receiver got {acknowledged} of {payload_bytes} bytes")
    print(f"{elapsed_s:.9f}", flush=True)


def measure_link(wan: EmulatedWAN, sender: int, receiver: int, payload_bytes: int) -> float:
    """Achieved goodput in bits/s of one TCP transfer from island ``sender`` to island ``receiver``."""
    module = [sys.executable, "-m", "islands.emulation.link_probe"]
    with subprocess.Popen(
        wan.command_prefix(receiver) + module + ["receive", wan.address(receiver)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as receiving:
        assert receiving.stdout is not None and receiving.stderr is not None  # both piped
        try:
            port = receiving.stdout.readline().strip()
            if not port:
                raise UserError(
                    f"link probe receiver in island {receiver} failed: {receiving.stderr.read().strip()}"
                )
            send_command = ["send", wan.address(receiver), port, str(payload_bytes)]
            sending = subprocess.run(
                wan.command_prefix(sender) + module + send_command,
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
            )
            if sending.returncode != 0:
                raise UserError(
                    f"link probe from island {sender} to {receiver} failed: {sending.stderr.strip()}"
                )
            receiving.wait(timeout=TIMEOUT_S)
        finally:
            if receiving.poll() is None:
                receiving.kill()
    return payload_bytes * BITS_PER_BYTE / float(sending.stdout)


def main(argv: list[str]) -> None:
    if argv[:1] == ["receive"] and len(argv) == 2:
        receive(argv[1])
    elif argv[:1] == ["send"] and len(argv) == 4:
        send(argv[1], int(argv[2]), int(argv[3]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
