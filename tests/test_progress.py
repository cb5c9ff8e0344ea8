"""Progress on the long commands: a bar redrawn in place on a terminal, a plain line now and then
elsewhere; ``report`` one bar per stage, ``quality --grid`` one line per run trained."""

from __future__ import annotations

import io

import pytest

from islands.analysis.progress_bar import LOG_INTERVAL_S, LOG_STEPS, ProgressBar, Stages
from islands.cli import main


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def test_the_mode_follows_whether_the_stream_is_a_terminal():
    terminal, log = FakeTerminal(), io.StringIO()
    for stream in (terminal, log):
        bar = ProgressBar("sweep", stream=stream)
        bar(0, 4)
        bar(4, 4)
        bar.close()
    assert terminal.getvalue().startswith("\rsweep [") and terminal.getvalue().count("\r") == 2
    assert [line.split(",")[0] for line in log.getvalue().splitlines()] == [
        "sweep: 0 of 4 done",
        "sweep: 4 of 4 done",
    ]


def test_off_a_terminal_a_slow_run_still_logs_every_interval():
    # 1000 runs of one second each: a tenth every 100 s, and a line every 30 s between the tenths
    assert LOG_INTERVAL_S == 30
    clock, log = FakeClock(), io.StringIO()
    bar = ProgressBar("plan: searches", stream=log, interactive=False, clock=clock)
    for done in range(1001):
        clock.now_s = float(done)
        bar(done, 1000)
    logged = [int(line.split(": ")[2].split(" of ")[0]) for line in log.getvalue().splitlines()]
    assert logged == sorted({h + k for h in range(0, 1000, 100) for k in (0, 30, 60, 90)} | {1000})
    assert log.getvalue().splitlines()[-1] == "plan: searches: 1000 of 1000 done, 1000.0 s"


def test_a_note_on_a_terminal_goes_above_the_bar_which_is_drawn_again():
    screen = FakeTerminal()
    bar = ProgressBar("quality: runs trained", stream=screen)
    bar(1, 2)
    drawn = screen.getvalue()
    bar.note("quality: 1 of 2: ddp: eval loss 3.1000")
    assert (
        screen.getvalue() == drawn + "\r\033[K" + "quality: 1 of 2: ddp: eval loss 3.1000\n" + drawn
    )


def test_a_note_off_a_terminal_is_a_plain_line():
    log = io.StringIO()
    ProgressBar("quality", stream=log, interactive=False).note("one run done")
    assert log.getvalue() == "one run done\n"


def test_stages_each_get_a_line_of_their_own():
    screen, clock = FakeTerminal(), FakeClock()
    stages = Stages("report", stream=screen, clock=clock)
    stages("plan searches")(3, 3)
    clock.now_s = 2.0
    stages("what-if grid")(2, 4)
    stages.close()
    first, second, end = screen.getvalue().split("\n")
    assert first.startswith("\rreport: plan searches [") and first.endswith("3/3 0.0 s")
    assert (
        second == "\rreport: what-if grid [" + "#" * 15 + "." * 15 + "] 2/4 0.0 s"
    )  # its own clock
    assert stages.elapsed_s == 2.0
    assert end == ""


SMALL = (
    'name = "small"\n[model]\nparameters = 1e9\n[schedule]\nalgorithm = "diloco"\ninner_steps = 100\n'
    "outer_steps = 1\noverlap_steps = 60\n"
    '[[island]]\nname = "a"\nreplicas = 2\nstep_time_s = 1.0\nbandwidth_gbps = 1.0\n'
)
# the what-if grid of SMALL: H 50 and 100 (at equal work, 200 would be above the run's 100 inner steps)
# x bits 4, 8, 16 x five bandwidths x M 2, 4: the combinations the bar counts
WHATIF_RUNS = 2 * 3 * 5 * 2


@pytest.fixture
def small(scenario_file):
    return str(scenario_file(SMALL))


def report(small: str, out) -> int:
    return main(["report", small, "--no-fragments", "--jobs", "1", "-o", str(out)])


def test_report_off_a_terminal_logs_each_stage(small, tmp_path, capsys):
    assert report(small, tmp_path / "r.html") == 0
    lines = capsys.readouterr().err.splitlines()
    starts = [line.split(",")[0] for line in lines if ": 0 of " in line]
    assert [start.split(": 0 of ")[0] for start in starts] == [
        "report: plan searches",
        "report: what-if grid",
        "report: heatmap sweep",
    ]
    assert starts[1:] == [
        f"report: what-if grid: 0 of {WHATIF_RUNS} done",
        "report: heatmap sweep: 0 of 25 done",
    ]
    assert f"report: what-if grid: {WHATIF_RUNS} of {WHATIF_RUNS} done" in "\n".join(lines)
    assert "\r" not in "\n".join(lines)


def test_report_on_a_terminal_draws_a_bar_per_stage(small, tmp_path, monkeypatch):
    screen = FakeTerminal()
    monkeypatch.setattr("sys.stderr", screen)
    assert report(small, tmp_path / "r.html") == 0
    stage_lines = screen.getvalue().split("\n")[:3]
    assert [line.rsplit("\r", 1)[1].split(" [")[0] for line in stage_lines] == [
        "report: plan searches",
        "report: what-if grid",
        "report: heatmap sweep",
    ]
    assert f"] {WHATIF_RUNS}/{WHATIF_RUNS} " in stage_lines[1]


def test_quality_grid_shows_each_run_and_the_count(monkeypatch, capsys):
    # the training itself replaced by a stand-in: three runs (DDP at M = 2, then H = 50 and 100)
    losses = iter([3.0, 3.2, 3.1])
    monkeypatch.setattr(
        "islands.analysis.quality.quality_runs.trained",
        lambda name, overrides, workers, out: {"final_eval_loss": next(losses), "parameters": 1000},
    )
    assert (
        main(["quality", "worked-example", "--grid", "inner_steps=50,100", "--steps", "100"]) == 0
    )
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == (
        "quality: 100 inner steps per worker for every run, DDP at equal tokens; outer steps "
        "H = 50: 2, H = 100: 1; H = 50, 100 below 20 outer steps: marked, outside the papers' regime"
    )
    assert lines[1].startswith("quality: runs trained: 0 of 3 done")
    assert lines[2].startswith("quality: 1 of 3: ddp (workers 2): eval loss 3.0000")
    assert [line.split(",")[0] for line in lines if line.startswith("quality: runs trained")] == [
        f"quality: runs trained: {done} of 3 done" for done in range(4)
    ]


def plan_objective(small: str) -> int:
    return main(["plan", small, "--objective", "time-to-loss", "--no-fragments", "--jobs", "1"])


def test_plan_objective_off_a_terminal_logs_both_searches(small, capsys):
    assert plan_objective(small) == 0
    lines = capsys.readouterr().err.splitlines()
    starts = [line.split(": 0 of ")[0] for line in lines if ": 0 of " in line]
    assert starts == ["plan: searches", "plan: candidates priced"]
    assert len(lines) <= 2 * (
        1 + LOG_STEPS
    )  # a start and at most a line per tenth each, in under 30 s


def test_plan_objective_on_a_terminal_draws_each_search_on_its_own_line(small, monkeypatch):
    screen = FakeTerminal()
    monkeypatch.setattr("sys.stderr", screen)
    assert plan_objective(small) == 0
    lines = screen.getvalue().split("\n")
    assert [line.rsplit("\r", 1)[1].split(" [")[0] for line in lines[:2]] == [
        "plan: searches",
        "plan: candidates priced",
    ]
    done, total = lines[1].rsplit("] ", 1)[1].split(" ")[0].split("/")
    assert done == total and lines[2] == ""


def test_a_failed_quality_run_ends_the_bar_before_the_error(monkeypatch):
    from islands.errors import UserError

    def fails(name, overrides, workers, out):
        raise UserError("the quality run failed")

    screen = FakeTerminal()
    monkeypatch.setattr("sys.stderr", screen)
    monkeypatch.setattr("islands.analysis.quality.quality_runs.trained", fails)
    assert main(["quality", "worked-example", "--grid", "inner_steps=50", "--steps", "100"]) == 2
    regime, bar, error = screen.getvalue().split("\n")[:3]
    assert regime.startswith("quality: 100 inner steps per worker for every run")
    assert bar.startswith("\rquality: runs trained [") and "] 0/2 " in bar
    assert "the quality run failed" in error
