"""The one exception type for bad user input: the CLI prints its message on one line and exits non-zero."""


class ElectraError(Exception):
    """A problem with the user's input, files or settings; the message says what is wrong and what to do."""
