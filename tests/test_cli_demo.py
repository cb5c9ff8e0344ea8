"""``islands demo --no-train``: the schedules side by side at equal work, and where it writes."""

from __future__ import annotations

from islands.cli import main

# tau = 60 of H = 100 leaves P = 1 as the only fragment count, which keeps the report's plan small
SMALL = (
    'name = "small"\ndescription = "two islands"\n[model]\nparameters = 1e9\ntokens_per_step = 1000\n'
    '[schedule]\nalgorithm = "diloco"\ninner_steps = 100\nouter_steps = 2\noverlap_steps = 60\n'
    '[[island]]\nname = "a"\nreplicas = 2\nstep_time_s = 1.0\nbandwidth_gbps = 1.0\n'
)


def test_demo_compares_the_schedules_at_equal_work(tmp_path, scenario_file, capsys):
    assert (
        main(["demo", str(scenario_file(SMALL)), "--no-train", "--out", str(tmp_path / "out")]) == 0
    )
    out = capsys.readouterr().out
    # 2 outer steps of H = 100: DDP runs 200 steps; 200 steps x 1000 tokens per worker
    assert "Equal work: every schedule runs 200 inner steps per worker (200k tokens)." in out
    rows = {
        line.split()[0]: line.split()
        for line in out.splitlines()
        if line.split()[:1] in (["ddp"], ["diloco"])
    }
    assert rows["ddp"][1] == rows["diloco"][1] == "200"
    # 1e9 bf16 values, ring of 2: each sends 2 GB per sync, 16 s at 1 Gbit/s; DDP: 200 x (1 + 16) s
    assert rows["ddp"][2:4] == ["56.7", "min"] and rows["diloco"][2:4] == ["232.0", "s"]
    assert {path.name for path in (tmp_path / "out").iterdir()} == {
        "small-bandwidth.png",
        "small-report.html",
    }


def test_demo_refuses_an_out_that_is_a_file(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["demo", "--no-train", "--out", str(blocker)]) == 2
    assert (
        capsys.readouterr().err.strip()
        == f"islands demo: error: {blocker}: --out must be a folder, and this is a file"
    )


def test_demo_refuses_before_any_work_an_out_holding_an_earlier_demos_run(tmp_path, capsys):
    """Found running `make demo` twice: the trainer refused the earlier run's folder after the
    calibration, 30 s in; now the demo says so first (`make demo` starts from a fresh real run)."""
    earlier = tmp_path / "out" / "real-run" / "run"
    earlier.mkdir(parents=True)
    (earlier / "summary.json").write_text("{}")
    assert main(["demo", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr() == (
        "",
        f"islands demo: error: {tmp_path / 'out'}: {earlier} holds an earlier demo's run: "
        f"remove {tmp_path / 'out' / 'real-run'} or give --out another folder\n",
    )
    assert (
        main(["demo", "--no-train", "--out", str(tmp_path / "out")]) == 0
    )  # no real run: nothing in its way
