"""Exit statuses shared by every command, so scripts can rely on them."""

from enum import IntEnum


class Exit(IntEnum):
    """The exit statuses every command uses."""

    OK = 0
    NOT_FOUND = 1  # ask/log: nothing matched well enough to name a cause
    USAGE = 2  # bad input: empty query, unknown id, unreadable file, invalid knowledge
    INTERNAL = 3  # a bug in triage itself
    WARN = 4  # probe: the worst status was `warn`
    FAIL = 5  # probe: the worst status was `fail` or `error`
    INTERRUPTED = 130
