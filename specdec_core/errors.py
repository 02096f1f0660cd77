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


OUT_OF_MEMORY = (
    "out of memory {what}; try a smaller dtype (--dtype bfloat16), a device map that spreads "
    "the model (--device-map auto), or a shorter context (a shorter prompt, fewer new tokens)"
)


def is_out_of_memory(error: BaseException) -> bool:
    """torch's (CUDA, MPS, CPU allocator) out-of-memory errors and Python's MemoryError."""
    return isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError"


def out_of_memory(what: str) -> SpecdecError:
    """The one-line message for running out of memory `what` ('while loading …')."""
    return SpecdecError(OUT_OF_MEMORY.format(what=what))
