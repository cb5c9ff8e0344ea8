"""The launch spec a local launcher gives each process (``trainer/runtime/spec.py``): every spec
survives its one variable unchanged, torchrun's processes get theirs from the user's two variables,
and a malformed one is one line."""

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from islands.errors import UserError
from islands.trainer.runtime.spec import SPEC_VARIABLE, LaunchSpec, launch_spec

texts = st.none() | st.text(max_size=20)
specs = st.builds(
    LaunchSpec,
    launched=st.booleans(),
    join_at_s=st.none() | st.floats(min_value=0, max_value=1e9, allow_nan=False),
    incarnation=texts,
    store_hosted=st.booleans(),
    syncer=st.booleans(),
    wan_pacer=texts,
    object_store=texts,
    plan_file=texts,
    out_dir=texts,
    resume_dir=texts,
    stop_after=st.none() | st.integers(min_value=1, max_value=10**6),
)


@given(specs)
def test_every_spec_survives_its_variable(spec):
    environment = spec.environment()
    assert list(environment) == [SPEC_VARIABLE] and launch_spec(environment) == spec


def test_under_torchrun_the_users_variables_give_the_spec():
    assert launch_spec({}) == LaunchSpec()
    spec = launch_spec(
        {"ISLANDS_SYNCER": "1", "ISLANDS_JOIN_AT_S": "12.5", "TORCHELASTIC_USE_AGENT_STORE": "True"}
    )
    assert (spec.syncer, spec.join_at_s, spec.store_hosted, spec.launched) == (
        True,
        12.5,
        True,
        False,
    )
    assert launch_spec({"ISLANDS_SYNCER": "0"}).syncer is False


@pytest.mark.parametrize(
    "text, message",
    [
        ("{", "ISLANDS_LAUNCH: not JSON"),
        ("[]", "ISLANDS_LAUNCH: must be an object with keys among"),
        ('{"ranks": 3}', "ISLANDS_LAUNCH: must be an object with keys among"),
        ('{"launched": "yes"}', "ISLANDS_LAUNCH: launched = 'yes' is not valid"),
        ('{"join_at_s": -1}', "ISLANDS_LAUNCH: join_at_s = -1 is not valid"),
        ('{"join_at_s": NaN}', "ISLANDS_LAUNCH: join_at_s = nan is not valid"),
        ('{"join_at_s": true}', "ISLANDS_LAUNCH: join_at_s = True is not valid"),
        (
            '{"join_at_s": 1' + "0" * 400 + "}",
            "ISLANDS_LAUNCH: join_at_s = 1000",
        ),  # past float's range
        ('{"stop_after": 0}', "ISLANDS_LAUNCH: stop_after = 0 is not valid"),
        ('{"stop_after": 2.5}', "ISLANDS_LAUNCH: stop_after = 2.5 is not valid"),
        ('{"plan_file": 7}', "ISLANDS_LAUNCH: plan_file = 7 is not valid"),
        ('{"object_store": 7}', "ISLANDS_LAUNCH: object_store = 7 is not valid"),
    ],
)
def test_a_malformed_spec_is_one_line(text, message):
    with pytest.raises(UserError, match="^" + message.replace("[", r"\[")) as refused:
        launch_spec({SPEC_VARIABLE: text})
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("value", ["soon", "nan", "-3", "inf", ""])
def test_a_bad_join_time_under_torchrun_is_one_line(value):
    with pytest.raises(
        UserError, match=f"ISLANDS_JOIN_AT_S={value!r}: must be a number of seconds >= 0"
    ):
        launch_spec({"ISLANDS_JOIN_AT_S": value})


def test_the_spec_is_one_json_object_of_its_fields():
    document = json.loads(LaunchSpec(join_at_s=3.0, stop_after=2).environment()[SPEC_VARIABLE])
    assert (
        document["join_at_s"] == 3.0
        and document["stop_after"] == 2
        and not math.isnan(document["join_at_s"])
    )
    assert set(document) == {
        "launched",
        "join_at_s",
        "incarnation",
        "store_hosted",
        "syncer",
        "wan_pacer",
        "object_store",
        "plan_file",
        "out_dir",
        "resume_dir",
        "stop_after",
    }


def test_a_process_without_a_launcher_is_one_line_and_exit_code_2():
    import os
    import subprocess
    import sys

    environment = {name: value for name, value in os.environ.items() if name != SPEC_VARIABLE}
    done = subprocess.run(
        [sys.executable, "-m", "islands.trainer"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert done.stderr.startswith(
        "islands train: error: python -m islands.trainer runs a process that a launcher"
    )
