"""The one exception type front ends turn into a single line and exit status 2, and how such a line
quotes what the user gave (cut short: an argument can be 100 KB, and a message stays one line)."""

MAX_SHOWN = 80


class UserError(Exception):
    """Bad input from the user or a broken knowledge file: reported in one line, no traceback."""


def shown(text: object, limit: int = MAX_SHOWN) -> str:
    """`text` quoted for a one-line message: repr'd, on one line, at most about `limit` characters.
    A long value loses its middle, so a path keeps both its start and its file name."""
    flat = " ".join(str(text).splitlines()) if not isinstance(text, str) else text.replace("\n", " ")
    flat = flat.replace("\r", " ")
    if len(flat) <= limit:
        return repr(flat)
    tail = (limit - 3) // 3
    return repr(flat[: limit - 3 - tail] + "..." + flat[len(flat) - tail :])
