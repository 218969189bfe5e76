"""The one exception type front ends turn into a single line and exit status 2."""


class UserError(Exception):
    """Bad input from the user or a broken knowledge file: reported in one line, no traceback."""
