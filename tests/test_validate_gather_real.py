"""``islands validate`` of an object-store case: a real scaled run over the kernel-emulated WAN (the
store a host of its own behind its shaped link) against the simulator. One case, the store's, keeps
the suite short (a case takes about 30 s, most of it the trainer's start and its first broadcast of the
weights); the ring and direct gathers' cases are measured in docs/validation.md and their payloads and
scaling checked in tests/test_validate_gather.py.

Skipped where network namespaces are unavailable (not root, no iproute2), as
tests/test_validate_real.py is. Wall time is held to the suite's worst-case target here (10%), not
issue 47's 3% and 8% per sync, which docs/validation.md reports over repeated runs: at a step of
0.1 s on two shared cores one busy second moves a case by more.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from islands.cli import main
from islands.emulation import available
from islands.validation import suite

KERNEL_OK, WHY_NOT = available()
pytestmark = pytest.mark.skipif(
    not KERNEL_OK, reason=f"kernel WAN emulation unavailable: {WHY_NOT}"
)
CASES = ("topk-store-m3-k2",)


@pytest.fixture(scope="module")
def document(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("validate-gather")
    arguments = [f"--case={name}" for name in CASES]
    code = main(
        [
            "validate",
            "--suite",
            *arguments,
            "--step-time",
            "0.1",
            "--target-wall",
            "1",
            "--out",
            str(out_dir),
        ]
    )
    assert code == 0
    return json.loads((out_dir / "suite.json").read_text())


def figure(case: dict, name: str) -> dict:
    return next(f for f in case["figures"] if f["name"] == name)


def test_the_cases_ran_and_their_wall_time_is_within_the_suites_worst(document):
    assert [case["case"] for case in document["cases"]] == list(CASES)
    for case in document["cases"]:
        assert abs(figure(case, "wall time")["error"]) < suite.TARGET_WORST, case["case"]


def test_the_trainer_moved_the_closed_form_bytes(document):
    """Upload per round: one PUT of the closed-form payload to the store."""
    for case in document["cases"]:
        assert figure(case, "bytes per worker (trainer)")["error"] == 0.0, case["case"]


def test_the_store_host_took_in_and_sent_out_the_closed_form_and_its_headers(document):
    """Its interface: every worker's PUT (M payloads a round) in, the K GETs of each (M x K) out,
    each plus its frames' headers and the other way's ACKs (a few percent)."""
    store = next(case for case in document["cases"] if case["case"] == "topk-store-m3-k2")
    for name in ("store ingress (interface)", "store egress (interface)"):
        assert 0 < -figure(store, name)["error"] < 0.15, name


def test_no_namespace_is_left(document):
    namespaces = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=True
    ).stdout
    assert "isv" not in namespaces
