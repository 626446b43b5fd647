"""The ``tdyn`` console script (and ``python -m figures``): the interrupt contract of
:mod:`figures.cli` from the process's first instant.

A Ctrl-C or SIGTERM that arrives while the command's modules are still importing (the first
second or two), or after the command has printed its last line, is outside the CLI's own handler;
Python would print a traceback and die by the signal. Here it is one line and exit 130 (Ctrl-C) or
143 (SIGTERM), like any other interrupt. This module imports nothing of tdyn until the handlers are
in place.
"""

from __future__ import annotations

import signal
import sys

__all__ = ["main", "exit_interrupted"]

_LINES = {signal.SIGINT: (130, "interrupted: stopped by Ctrl-C (files written so far are complete)"),
          signal.SIGTERM: (143, "error: interrupted: stopped by SIGTERM (files written so far are complete)")}


class _EarlyTerm(BaseException):
    """SIGTERM before the CLI installs its own handler."""


def _raise_early_term(signum, frame):
    raise _EarlyTerm


def exit_interrupted(code: int) -> None:
    """Exit with ``code`` after an interrupt was reported: the ``atexit`` handlers run (a Ray
    session closes, ...), then the process ends with exactly ``code``. Not ``sys.exit``: after a
    Ctrl-C that tdyn caught while modules were importing, the interpreter's own shutdown still
    ended the process by SIGINT now and then (exit status -2 instead of 130: 7 runs in 100 of a
    Ctrl-C 0.05-0.35 s after start, measured; 0 in 150 with this exit)."""
    import atexit
    import os

    for sig in _LINES:  # a further signal while the process ends is ignored
        signal.signal(sig, signal.SIG_IGN)
    try:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        atexit._run_exitfuncs()
    finally:
        os._exit(code)


def _stopped(signum: int) -> None:
    for sig in _LINES:  # a further signal while the interpreter shuts down is ignored
        signal.signal(sig, signal.SIG_IGN)
    code, line = _LINES[signum]
    try:
        if signum == signal.SIGINT and sys.stderr.isatty():  # end the terminal's "^C" echo
            sys.stderr.write("\n")
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    finally:
        exit_interrupted(code)


def main() -> None:
    """Run :func:`figures.cli.main` with the early and late interrupts reported in one line."""
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_early_term)
    try:
        from figures.cli import main as cli

        cli()
    except KeyboardInterrupt:
        _stopped(signal.SIGINT)
    except _EarlyTerm:
        _stopped(signal.SIGTERM)
    except SystemExit as done:  # the CLI reported an interrupt (130, 143): end with exactly that code
        if done.code in {code for code, _ in _LINES.values()}:
            exit_interrupted(done.code)
        raise
    finally:  # past the command: SIGTERM has its default action again
        if signal.getsignal(signal.SIGTERM) is _raise_early_term:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


if __name__ == "__main__":  # pragma: no cover
    main()
