"""What Decoupled DiLoCo's learners and syncer say to each other through the run's ``TCPStore``.

The syncer hosts the store (so every byte to or from it crosses the syncer's own link); learners
connect to it. Everything lives under ``decoupled/``:

* ``inbox``: one queue the syncer pops, of messages ``hello`` (a learner starts or returns),
  ``report`` (a fragment's pseudo-gradient is uploaded) and ``done`` (a learner finished);
* ``up/I/N/S/K``: piece K of the payload of report S of learner I's incarnation N, set before the
  report's header is pushed: a learner killed while it uploads leaves pieces and no report;
* ``to/I/N``: the queue of learner I's incarnation N: the syncer's replies (the hello's start, and
  per report the global fragment as a difference against what the learner holds), each flagged
  first by ``ready/I/N/S`` so the learner can tell waiting at the syncer from downloading;
* ``beat/I``: a counter learner I's heartbeat adds to; ``rows/I/N``: its trace rows, appended as
  they are recorded (JSON lines), so a killed learner's rows survive it;
* ``over``: set by the local launcher once no learner process is left.

A message is a 4-byte header length, a JSON header and the payload bytes.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import torch

ROOT = "decoupled"
INBOX = f"{ROOT}/inbox"
OVER = f"{ROOT}/over"
PIECE_BYTES = 1 << 20
LENGTH = struct.Struct(">I")


def key(*parts: Any) -> str:
    return "/".join([ROOT, *(str(part) for part in parts)])


def pack(header: dict[str, Any], payload: bytes = b"") -> bytes:
    text = json.dumps(header).encode()
    return LENGTH.pack(len(text)) + text + payload


def unpack(message: bytes) -> tuple[dict[str, Any], bytes]:
    (length,) = LENGTH.unpack_from(message)
    start = LENGTH.size
    return json.loads(message[start : start + length]), message[start + length :]


def to_bytes(data: torch.Tensor) -> bytes:
    """A uint8 wire buffer (``quantize.encode``) as bytes."""
    return data.contiguous().numpy().tobytes()


def from_bytes(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def split_pieces(data: bytes) -> list[bytes]:
    return [data[start : start + PIECE_BYTES] for start in range(0, len(data), PIECE_BYTES)] or [
        b""
    ]
