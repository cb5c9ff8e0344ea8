"""The other stacks' JSON files islands reads, changed by the same mutations as its own files
(``helpers/mutations.py``), which the format's own suites (test_properties_tool_files.py,
test_properties_step_logs.py) do not draw: arrays 100,000 deep, a key written twice, an unknown key
added, an entry repeated. An iperf3 ``-J`` file (``islands calibrate --iperf3``) and a Chrome trace
(``islands compare SCENARIO TRACE``) are read, or refused in one line naming the file."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.mutations import answer, json_text, mutated
from helpers.step_logs import DATA
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from islands.validation.logs.compare_log import read_log
from islands.validation.toolfiles.readers import read_iperf3

FIXTURES = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
IPERF3 = sorted((Path(__file__).parent / "data" / "calibrate").glob("iperf3-*.json"))


@given(st.sampled_from(IPERF3), st.data())
@FIXTURES
def test_an_iperf3_file_changed_at_one_place_is_read_or_refused_naming_it(tmp_path, sample, data):
    changed, what = data.draw(mutated(json.loads(sample.read_text())))
    path = tmp_path / sample.name
    path.write_text(json_text(changed) + "\n")
    answer(lambda: read_iperf3(path), path)


@given(st.data())
@FIXTURES
def test_a_chrome_trace_changed_at_one_place_is_read_or_refused_naming_it(tmp_path, data):
    changed, what = data.draw(mutated(json.loads((DATA / "chrome-trace.json").read_text())))
    path = tmp_path / "trace.json"
    path.write_text(json_text(changed) + "\n")
    answer(lambda: read_log(path, "chrome"), path)


def test_a_chrome_trace_with_a_key_written_twice_is_refused_naming_it(tmp_path):
    """json.loads kept the second "dur" silently: the step's time would be either value."""
    path = tmp_path / "trace.json"
    path.write_text(
        '{"traceEvents": [{"ph": "X", "name": "ProfilerStep#0", "ts": 0, "dur": 1000, "dur": 9}]}\n'
    )
    assert answer(lambda: read_log(path, "chrome"), path) is None
