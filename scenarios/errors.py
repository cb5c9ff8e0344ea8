"""The one error type that bad scenario input raises: it names the file, the key and the rule."""

from islands.errors import UserError


class ScenarioError(UserError, ValueError):
    """A scenario that cannot be used, reported as one line: ``FILE: KEY: RULE``."""

    def __init__(self, source: str, key: str, rule: str):
        self.source = source
        self.key = key
        self.rule = rule
        where = f"{source}: {key}" if key else source
        super().__init__(f"{where}: {rule}")

    def __reduce__(self):
        """Rebuild from the three parts, so the error survives a trip through a process pool."""
        return type(self), (self.source, self.key, self.rule)
