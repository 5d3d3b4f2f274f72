"""The one exception type for bad user input: the CLI prints its message on one line and exits non-zero."""


class ElectraError(Exception):
    """A problem with the user's input, files or settings; the message says what is wrong and what to do."""


class Interrupted(ElectraError):
    """The user stopped a command (Ctrl-C, SIGTERM) after it saved what it had; the message says
    how to continue. The CLI exits with 130, as for an interrupt."""
