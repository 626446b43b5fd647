"""User-facing error types shared by every stage.

They live in the bottom layer (theory) so that simulate, empirical and figures can raise and catch
the same classes. The CLI maps each of them to one line on stderr and exit code 2.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any


class TdynError(Exception):
    """Base class of every error that is the user's to fix (bad config, diverged run, ...)."""

    def one_line(self) -> str:
        return " ".join(str(self).split())


class ConfigError(TdynError, ValueError):
    """An invalid configuration value: names the field and says what is wrong with it."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class TdynWarning(UserWarning):
    """Something the user should know that did not stop the command (a damaged store cell
    recomputed, ...): names the field like :class:`ConfigError`. The CLI prints it as one line
    ``warning: <field>: <message>`` on stderr."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class SolverError(TdynError, RuntimeError):
    """An ODE/SDE solver failed. Carries the last time at which the state was finite
    (``t_reached``) and, when available, the partial result up to it. One line:
    ``solve: paper/system failed: <why> (last finite state at t=...)``."""

    def __init__(self, paper: str, system: str, t_reached: float, message: str, partial: Any = None):
        self.paper = paper
        self.system = system
        self.t_reached = float(t_reached)
        self.message = message
        self.partial = partial
        super().__init__(
            f"solve: {paper}/{system} failed: {message} (last finite state at t={self.t_reached:.6g})"
        )

    def with_note(self, note: str) -> "SolverError":
        """The same error with ``note`` appended to its message (e.g. where the partial result went)."""
        err = SolverError(self.paper, self.system, self.t_reached, f"{self.message}; {note}", self.partial)
        err.field = getattr(self, "field", "solve")
        return err


class DivergenceError(TdynError, FloatingPointError):
    """Training produced NaN/Inf. Carries the step and the partial trajectory logged so far.
    One line: ``train: training diverged at step k: <why>``."""

    def __init__(self, step: int, message: str, partial: Any = None):
        self.step = int(step)
        self.message = message
        self.partial = partial
        super().__init__(f"train: training diverged at step {self.step}: {message}")

    def with_note(self, note: str) -> "DivergenceError":
        return DivergenceError(self.step, f"{self.message}; {note}", self.partial)


def did_you_mean(value: Any, choices: Collection) -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``choices`` to ``value`` (difflib; ``_`` and
    ``-`` count as the same), or ``""`` when none is close."""
    import difflib

    names = [str(c) for c in choices]
    norm = {n.replace("_", "-").lower(): n for n in names}
    key = str(value).replace("_", "-").lower()
    close = [key] if key in norm else difflib.get_close_matches(key, list(norm), n=1, cutoff=0.6)
    return f" (did you mean {norm[close[0]]!r}?)" if close else ""


def check_choice(field: str, value: Any, allowed: Collection) -> None:
    """Raise ``ConfigError(field, "must be one of ...")`` unless ``value`` is in ``allowed``."""
    if value not in allowed:
        raise ConfigError(field, f"must be one of {tuple(allowed)}, got {value!r}{did_you_mean(value, allowed)}")
