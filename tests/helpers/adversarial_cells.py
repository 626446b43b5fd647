"""Cell functions for tests/test_adversarial.py (importable by the sweep processes it starts)."""

from __future__ import annotations

import os
import time

import numpy as np

from simulate.trajectory import make_trajectory


def counted(paper: str, config: dict, *, log: str, seconds: float = 0.5):
    """``y = x * t`` after ``seconds``; appends one line per computation to ``log``."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{config['x']} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    time.sleep(seconds)
    t = np.arange(5.0)
    return make_trajectory(t, {"y": float(config["x"]) * t}, paper=paper, system="counted", source="test",
                           config=config)
