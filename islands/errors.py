"""Errors caused by the user's input: the CLI prints them as one line and exits with code 2."""


class UserError(Exception):
    """Bad input (a file, a flag, a value): shown to the user as one line, never as a traceback."""
