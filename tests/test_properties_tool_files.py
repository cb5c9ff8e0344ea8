"""Bad tool files for ``islands calibrate --iperf3 / --ping / --nccl-tests``, generated: every sample in
tests/data/calibrate cut at every byte, and (hypothesis) with a value swapped for another type, NaN,
infinity or a huge number, a key removed, or a line changed, dropped, repeated or added. Each is read,
or refused in one line naming the file (``UserError``); never a traceback, and a cut file is never
read as anything but the shorter run it then is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from islands.errors import UserError
from islands.validation.toolfiles.hosts_profile import ToolFiles, profile_from_files
from islands.validation.toolfiles.readers import read_iperf3, read_nccl_tests, read_ping

SAMPLES = Path(__file__).parent / "data" / "calibrate"
IPERF3 = sorted(SAMPLES.glob("iperf3-*.json"))
NCCL = sorted(SAMPLES.glob("nccl-*.txt"))
PING = sorted(SAMPLES.glob("ping-*.txt"))
HUGE = "@@an integer of 5,000 digits@@"  # json.dumps cannot write one: put in after
JUNK_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.just(HUGE),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
JUNK_TOKENS = st.one_of(
    st.sampled_from(
        [
            "nan",
            "inf",
            "-inf",
            "-1",
            "0",
            "1e999",
            "9" * 40,
            "9" * 5000,
            "N/A",
            "",
            "x",
            "\u00b2",
            "0x10",
            "-0",
            "3.5.1",
            "#",
            "time=nan ms",
            "time=1e9 ms",
        ]
    ),
    st.text(max_size=12),
)


def refused_or_read(reader, path: Path):
    """What ``reader`` makes of ``path``, or None where it refused it in one line naming it."""
    try:
        return reader(path)
    except UserError as error:
        message = str(error)
        assert len(message.splitlines()) == 1 and str(path) in message, message
        return None


def without_path(result):
    return {key: value for key, value in vars(result).items() if key != "path"}


@pytest.mark.parametrize("sample", IPERF3, ids=[path.name for path in IPERF3])
def test_an_iperf3_file_cut_anywhere_is_refused(sample, tmp_path):
    data, whole = sample.read_bytes(), without_path(read_iperf3(sample))
    cut = tmp_path / "cut.json"
    for length in range(len(data)):
        cut.write_bytes(data[:length])
        result = refused_or_read(read_iperf3, cut)
        if result is not None:  # only the final line end was cut
            assert not data[length:].strip() and without_path(result) == whole


@pytest.mark.parametrize("sample", NCCL + PING, ids=[path.name for path in NCCL + PING])
def test_a_text_file_cut_anywhere_is_refused_or_reads_as_its_complete_lines(sample, tmp_path):
    reader = read_nccl_tests if sample in NCCL else read_ping
    data, whole = sample.read_bytes(), reader(sample)
    cut = tmp_path / "cut.txt"
    for length in range(len(data)):
        cut.write_bytes(data[:length])
        result = refused_or_read(reader, cut)
        if result is None:
            continue
        assert data[:length].endswith(b"\n")
        if reader is read_nccl_tests:  # the rows it has, as they were
            assert result.rows == whole.rows[: len(result.rows)] and result.test == whole.test
        else:  # the replies it has; all of them, the same round trip
            assert result.replies <= whole.replies
            assert result.replies < whole.replies or result.rtt_s == whole.rtt_s


def paths_in(value, prefix=()):
    """Every key path in a JSON document (objects and lists)."""
    yield prefix
    children = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, child in children:
        yield from paths_in(child, (*prefix, key))


@given(st.data())
def test_an_iperf3_file_with_a_value_swapped_or_a_key_removed_is_read_or_refused(
    tmp_path_factory, data
):
    sample = data.draw(st.sampled_from(IPERF3))
    document = json.loads(sample.read_text())
    path = data.draw(st.sampled_from([path for path in paths_in(document) if path]))
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    if isinstance(parent, dict) and data.draw(st.booleans()):
        del parent[path[-1]]
    else:
        parent[path[-1]] = data.draw(JUNK_VALUES)
    target = tmp_path_factory.mktemp("iperf3") / sample.name
    target.write_text(json.dumps(document, allow_nan=True).replace(f'"{HUGE}"', "9" * 5000))
    refused_or_read(read_iperf3, target)


@given(st.data())
def test_a_text_file_with_a_line_changed_is_read_or_refused(tmp_path_factory, data):
    sample = data.draw(st.sampled_from(NCCL + PING))
    lines = sample.read_text().splitlines()
    index = data.draw(st.integers(0, len(lines) - 1))
    change = data.draw(st.sampled_from(["token", "drop", "repeat", "add"]))
    tokens = lines[index].split(" ")
    if change == "token":
        tokens[data.draw(st.integers(0, len(tokens) - 1))] = data.draw(JUNK_TOKENS)
        lines[index] = " ".join(tokens)
    elif change == "drop":
        del lines[index]
    elif change == "repeat":
        lines.insert(index, lines[index])
    else:
        lines.insert(index, data.draw(JUNK_TOKENS))
    target = tmp_path_factory.mktemp("text") / sample.name
    target.write_text("\n".join(lines) + "\n")
    refused_or_read(read_nccl_tests if sample in NCCL else read_ping, target)


@given(st.data())
def test_a_changed_nccl_tests_file_makes_a_profile_or_one_line(tmp_path_factory, data):
    """Past the reader: the ranks, the fit and the ring's terms of whatever table it read."""
    lines = (SAMPLES / "nccl-all-reduce-3.txt").read_text().splitlines()
    for _ in range(data.draw(st.integers(1, 3))):
        index = data.draw(st.integers(0, len(lines) - 1))
        tokens = lines[index].split()
        if tokens:
            tokens[data.draw(st.integers(0, len(tokens) - 1))] = data.draw(
                st.sampled_from(["1", "3", "4", "8", "100000", "1e-9", "99999999", "N/A", "host-z"])
            )
            lines[index] = (
                "  ".join(tokens)
                if not lines[index].startswith("#")
                else "# " + " ".join(tokens[1:])
            )
    target = tmp_path_factory.mktemp("nccl") / "nccl.txt"
    target.write_text("\n".join(lines) + "\n")
    files = ToolFiles(
        {"a": ("10.0.0.1",), "b": ("10.0.0.2", "198.51.100.2"), "c": ("10.0.0.3",)},
        tuple(str(path) for path in IPERF3),
        (),
        str(target),
    )
    try:
        profile_from_files(files)
    except UserError as error:
        assert len(str(error).splitlines()) == 1 and "\n" not in str(error)
