"""User-facing errors: the message says what is wrong and what to do."""


class SpecdecError(Exception):
    """An error caused by input (a spec, a file, a prompt, a setting), not by a bug.

    The CLI prints it as one line on stderr and exits with code 2; the GUI shows it in a
    message box. The message must say what to do.
    """


def first_line(error: BaseException) -> str:
    """The first line of an exception's message (at most 200 characters), to quote in one."""
    text = str(error).strip().splitlines()
    return text[0][:200] if text else type(error).__name__
