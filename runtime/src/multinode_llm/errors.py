"""The one exception type for mistakes a person can fix (bad input, missing environment)."""


class UserError(Exception):
    """A problem the user can fix; the CLI prints its message on one line and exits non-zero.

    The message names the value that was wrong and says what to do, for example:
    ``RAY_NODE_COUNT='two' is not an integer: set it to the number of pods in the group``.
    """
