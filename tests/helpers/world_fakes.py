"""In-process fakes of the four ports of a trainer's world (``trainer/core/world.py``): one island, one
process (``Echo`` groups), no sockets. Each records what the trainer asked and hands back what a real
world would; ``FakeWorld`` is the four together."""

import contextlib
import types

from islands.trainer.core.diloco import ExchangerTransport
from islands.trainer.core.world import Groups
from islands.trainer.exchange.comm import Echo


class FakePeers:
    """Alone in every group; the exchanges over the plain exchange thread."""

    def __init__(self):
        self.groups = Groups(world=Echo(1), cross=Echo(1))

    def transport(self, exchanger, recorder, fragments):
        return ExchangerTransport(exchanger)

    def members(self):
        return [0]

    def reports(self):
        return False


class FakeDoor:
    """Enters with ``start`` (None: from the start) and counts the entries; the trace rows go to ``sink``."""

    def __init__(self, start=None):
        self.start = start
        self.entries = 0
        self.sink = []

    def share_initial_weights(self, model):
        pass

    def holds_checkpoint(self, resume_dir):
        return False

    def agree_on_resume(self, error, state):
        return [error]

    def start_s(self, state):
        return 0.0

    def entering(self, local):
        self.entries += 1
        return contextlib.nullcontext(self.start)

    def rows_sink(self):
        return self

    def write(self, text):
        self.sink.append(text)

    def flush(self):
        pass


class FakeRounds:
    """Counts the steps between which it was called and the evaluations; keeps the ending."""

    def __init__(self):
        self.between = 0
        self.evaluations = 0
        self.ending = None

    def between_steps(self, local):
        self.between += 1

    def publish_clock(self, paused=False):
        pass

    def pause_s(self, paused_s):
        return paused_s

    def evaluate(self, evaluate_on):
        self.evaluations += 1
        return evaluate_on(Echo(1), None)

    def finish(self, ending):
        self.ending = ending
        return {"steps": ending.step}


class FakeCommits:
    """Keeps every checkpoint (period, state) the trainer saved."""

    def __init__(self):
        self.saved = []

    def save_checkpoint(self, period, out_dir, state):
        self.saved.append((period, state))

    def state_dict(self):
        return {}

    def load_state(self, state):
        pass


class FakeWorld(FakePeers, FakeDoor, FakeRounds, FakeCommits):
    """The four fakes as one world that enters with ``start``."""

    def __init__(self, start=None):
        FakePeers.__init__(self)
        FakeDoor.__init__(self, start)
        FakeRounds.__init__(self)
        FakeCommits.__init__(self)


def reaches(start, target, limit=100_000) -> bool:
    """Whether ``target`` can be reached from ``start`` through the project's own objects (and the
    tests'): their
    attributes, the lists, tuples, sets and dicts they hold, bound methods and closures (torch's and
    the standard library's objects are not entered)."""
    seen, todo = set(), [start]
    while todo and len(seen) < limit:
        value = todo.pop()
        if value is target:
            return True
        if id(value) in seen:
            continue
        seen.add(id(value))
        todo.extend(parts_of(value))
    assert not todo, f"gave up after {limit} objects"
    return False


def parts_of(value):
    if isinstance(value, dict):
        return [*value.keys(), *value.values()]
    if isinstance(value, (list, tuple, set, frozenset)):
        return list(value)
    if isinstance(value, types.MethodType):
        return [value.__self__]
    if isinstance(value, types.FunctionType):
        return [cell.cell_contents for cell in value.__closure__ or () if cell_filled(cell)]
    if type(value).__module__.startswith(("islands.", "helpers.", "test_")):
        return [
            *getattr(value, "__dict__", {}).values(),
            *(
                getattr(value, name)
                for name in getattr(type(value), "__slots__", ())
                if hasattr(value, name)
            ),
        ]
    return []


def cell_filled(cell) -> bool:
    try:
        _ = cell.cell_contents
    except ValueError:
        return False
    return True
