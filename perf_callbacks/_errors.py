"""What an error says to a user: the errno's words, its name and the path (standard library only).

Example:
    >>> import errno
    >>> describe_error(OSError(errno.ENOSPC, "No space left on device"), "/out/run/rank0.pt.trace.json.gz")
    'No space left on device (ENOSPC): /out/run/rank0.pt.trace.json.gz'
    >>> describe_error(ValueError("bad value"))
    'ValueError: bad value'
"""

from __future__ import annotations

import errno
import os


def describe_error(err: BaseException, path: str | os.PathLike[str] | None = None) -> str:
    """``<strerror> (<ERRNO>): <path>`` for an ``OSError`` with an errno, else ``<Type>: <message>``.

    The path is the error's own ``filename`` when it has one, else ``path`` (a gzip or pickle write that fails on a
    full disk raises an ``OSError`` that names no file).
    """
    if not isinstance(err, OSError) or not err.errno:
        return f"{type(err).__name__}: {err}"
    code = errno.errorcode.get(err.errno, f"errno {err.errno}")
    text = f"{err.strerror or os.strerror(err.errno)} ({code})"
    where = err.filename if err.filename is not None else path
    return f"{text}: {os.fsdecode(where)}" if where is not None else text
