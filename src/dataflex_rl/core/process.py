"""Child processes that die with the process that started them.

`die_with_starter` prefixes a command line so that the child gets Linux's parent-death signal
(SIGKILL) and exits at once if its starter is already gone: an exec wrapper, since
``preexec_fn`` can deadlock in a process with threads (a Ray worker).
"""

from __future__ import annotations

import os
import sys

#: run by the child's interpreter before it becomes the command (``execvp``); the signal
#: survives exec
DIE_WITH_STARTER = """\
import ctypes, os, signal, sys
if sys.platform.startswith("linux"):
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
if os.getppid() != int(sys.argv[1]):
    os._exit(1)
os.execvp(sys.argv[2], sys.argv[2:])
"""


def die_with_starter(argv: list[str]) -> list[str]:
    """``argv`` run so that it dies with this process (see the module docstring)."""
    return [sys.executable, "-c", DIE_WITH_STARTER, str(os.getpid()), *argv]
