"""The signal dispositions of a user's terminal for the processes a test signals (imported as
``helpers.signals``).

A process started in the background by a non-interactive shell (``make test &``, a CI runner)
inherits SIGINT (and under some runners SIGTERM) *ignored*, and a child keeps that disposition:
Ctrl-C to ``nohup tdyn ... &`` is meant to do nothing. The contract the interrupt tests check is the
one a user at a terminal sees, so their children start with both signals at their defaults::

    subprocess.Popen([...], preexec_fn=user_terminal)
"""

from __future__ import annotations

import signal

__all__ = ["user_terminal"]


def user_terminal() -> None:
    """In the child, before ``exec``: SIGINT and SIGTERM back to their default actions."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
