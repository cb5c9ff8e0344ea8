"""What several test files share: scenarios built in code, hypothesis strategies, fakes and the small
runs the trainer's tests start. A test file imports from here (``from helpers.scenarios import
make_scenario``; ``tests/`` is on the path, pyproject.toml's ``pythonpath``), never from another
test file (tests/test_layout.py checks it)."""
