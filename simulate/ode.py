"""``solve``: integrate a ReducedSystem as an ODE with diffrax or scipy (the oracle).

One obvious entry point, as ``scipy.integrate.solve_ivp``: ``solve(system, params, y0, t)``
returns a Trajectory (xarray Dataset) whose ``status``/``message`` attributes report the solver's
outcome. A failed or non-finite solve raises :class:`SolverError` carrying the partial
trajectory up to the last good time.

Methods: :data:`ODE_METHODS` (scipy ``METHODS`` style), one table per backend, its default first.
The default (no backend, no method) is the ``numba`` backend's ``"auto"``: stiffness-aware, a
compiled explicit DOP853 while the flow is not stiff, scipy's LSODA once it is (:func:`_solve_auto`),
because reduced flows such as SCB's have a fast "mean" block next to a slow escape
(docs/papers/scb.md §3.4); measured 3-11x faster than scipy's LSODA per solve (``make bench``).
Each other backend's default is a stiff solver (scipy Radau; diffrax Kvaerno5 with a PID controller). (The SDE
schemes' table is :data:`simulate.METHODS`; hence the name ``ODE_METHODS``.)

Shared with :mod:`simulate.sde`, :mod:`simulate.sweep` and the SDE engines: :func:`enable_x64`,
:func:`check_times` and :func:`diffrax_solver`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from theory.core import ReducedSystem, enable_x64
from theory.errors import ConfigError, SolverError, check_choice
from theory.problem import Problem
from theory.refs import resolve_ref

from .trajectory import make_trajectory

__all__ = ["solve", "BACKENDS", "ODE_METHODS", "OdeMethod", "first_crossing", "enable_x64", "check_times",
           "diffrax_solver"]


@dataclass(frozen=True)
class OdeMethod:
    """One ODE solver of a backend: ``solver`` its class as ``"module:Class"`` (resolved on use, so
    importing :mod:`simulate` does not import diffrax), ``implicit`` whether it suits stiff flows
    (scipy's implicit methods get the system's Jacobian, :meth:`ReducedSystem.jacobian_numpy`;
    diffrax differentiates the jitted right-hand side itself), ``order`` its order of accuracy."""

    solver: str
    implicit: bool
    order: str


#: ODE solvers per backend, the default first: diffrax's solver classes and scipy's public
#: ``scipy.integrate`` solver classes (those ``solve_ivp`` accepts). Named ``ODE_METHODS`` because
#: :data:`simulate.METHODS` is the SDE schemes' table.
ODE_METHODS: dict[str, dict[str, OdeMethod]] = {
    "diffrax": {
        "Kvaerno5": OdeMethod("diffrax:Kvaerno5", True, "5 (ESDIRK, embedded 4)"),
        "Kvaerno3": OdeMethod("diffrax:Kvaerno3", True, "3 (ESDIRK, embedded 2)"),
        "Tsit5": OdeMethod("diffrax:Tsit5", False, "5 (explicit Runge-Kutta, embedded 4)"),
        "Dopri8": OdeMethod("diffrax:Dopri8", False, "8 (explicit Runge-Kutta, embedded 7)"),
        "Dopri5": OdeMethod("diffrax:Dopri5", False, "5 (explicit Runge-Kutta, embedded 4)"),
    },
    "scipy": {
        "Radau": OdeMethod("scipy.integrate:Radau", True, "5 (implicit Runge-Kutta)"),
        "BDF": OdeMethod("scipy.integrate:BDF", True, "1-5 (variable-order BDF)"),
        "LSODA": OdeMethod("scipy.integrate:LSODA", True, "1-12 (Adams / BDF switching)"),
        "RK45": OdeMethod("scipy.integrate:RK45", False, "5 (explicit Runge-Kutta, embedded 4)"),
        "DOP853": OdeMethod("scipy.integrate:DOP853", False, "8 (explicit Runge-Kutta)"),
        "RK23": OdeMethod("scipy.integrate:RK23", False, "3 (explicit Runge-Kutta, embedded 2)"),
    },
    "numba": {
        "auto": OdeMethod("simulate._numba_ode:dop853", True, "8 (DOP853) while non-stiff, then LSODA (1-12)"),
        "DOP853": OdeMethod("simulate._numba_ode:dop853", False, "8 (explicit Runge-Kutta, embedded 5 and 3)"),
    },
}
#: the ODE backends (``backend=`` of :func:`solve`), the default first
BACKENDS = tuple(ODE_METHODS)


#: |state| beyond which both backends stop and report divergence (with the partial trajectory)
STATE_BOUND = 1e150
#: diffrax stops (``dt_min_reached``) when its step falls below this fraction of the horizon: a
#: finite-time blow-up shrinks the step geometrically, which would otherwise spin to ``max_steps``
DT_MIN_FRACTION = 1e-12
#: ``"auto"``: the explicit method's step budget; beyond it (or when the Jacobian's fastest rate
#: alone would need more steps: ``max|lambda| (t1 - t0) / AUTO_STABILITY``) the flow counts as stiff
AUTO_EXPLICIT_STEPS = 20_000
#: DOP853's stability interval on the negative real axis, ``|h lambda| <~ 6``
AUTO_STABILITY = 6.0


def diffrax_solver(system: ReducedSystem, method: str, rtol: float, atol: float, max_steps: int):
    """``run(y0, p, ts) -> diffrax.Solution``: one compiled solve per (system, method, tolerances),
    kept on the system (:meth:`~theory.core.ReducedSystem.compiled`); parameters travel in
    ``args`` so new parameter values never recompile. ``method``: a key of
    ``ODE_METHODS["diffrax"]``."""
    check_choice("method", method, tuple(ODE_METHODS["diffrax"]))
    key = ("diffrax_solver", method, float(rtol), float(atol), int(max_steps))
    return system.compiled(key, lambda: _build_diffrax_solver(system, method, rtol, atol, max_steps))


def _build_diffrax_solver(system: ReducedSystem, method: str, rtol: float, atol: float, max_steps: int):
    enable_x64()
    import diffrax
    import jax

    f = system.to_jax()
    term = diffrax.ODETerm(lambda t, y, p: f(t, y, p))
    solver = resolve_ref(ODE_METHODS["diffrax"][method].solver)()

    import jax.numpy as jnp

    # divergence stops the solve at once (else the step size shrinks until max_steps)
    diverged = diffrax.Event(lambda t, y, args, **kw: ~(jnp.max(jnp.abs(y)) <= STATE_BOUND))

    @jax.jit
    def run(y0, p, ts):
        return diffrax.diffeqsolve(
            term, solver, t0=ts[0], t1=ts[-1], dt0=None, y0=y0, args=p,
            saveat=diffrax.SaveAt(ts=ts),
            stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol, dtmin=(ts[-1] - ts[0]) * DT_MIN_FRACTION,
                                                      force_dtmin=False),
            max_steps=max_steps, throw=False, event=diverged,
        )

    return run


def check_times(t) -> np.ndarray:
    """``t`` as a float64 array, checked: 1-D, at least two points, finite, strictly increasing
    (``ConfigError`` naming ``t`` otherwise)."""
    t = np.asarray(t, dtype=np.float64)
    if t.ndim != 1 or t.size < 2:
        raise ConfigError("t", "need a 1-D grid of at least two output times")
    if not np.all(np.isfinite(t)):
        raise ConfigError("t", "output times must be finite")
    if not np.all(np.diff(t) > 0):
        raise ConfigError("t", "output times must be strictly increasing")
    return t


def solve(
    system: ReducedSystem | Problem,
    params: Mapping[str, float] | None = None,
    y0: Mapping[str, float] | Sequence[float] | np.ndarray | None = None,
    t: Sequence[float] | np.ndarray | None = None,
    *,
    backend: str | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    method: str | None = None,
    max_steps: int | None = None,
    observables: bool = True,
):
    """Integrate ``system`` from ``y0`` at ``t[0]`` and report the state at every ``t``.

    Parameters
    ----------
    system: a :class:`ReducedSystem`, or a :class:`~theory.Problem` that carries ``params``, ``y0``,
            ``t`` and per-backend ``solve_options`` (used unless a keyword below overrides them).
    params: values of ``system.parameter_names`` (extra keys are ignored).
    y0:     initial state, by name or in ``system.state_names`` order.
    t:      strictly increasing output times (units: the system's time, e.g. optimiser steps).
    backend: ``"diffrax"`` (jit-compiled, float64), ``"scipy"`` (``solve_ivp``'s
            solver classes, stepped here so that a failure keeps the times reached) or ``"numba"``
            (the right-hand side and DOP853 compiled by numba, one call per solve) —
            :data:`BACKENDS`. No backend: ``"numba"`` (method ``"auto"``, stiffness-aware), or the
            first backend whose table holds ``method`` (``method="Kvaerno5"`` -> diffrax).
    method: a key of ``ODE_METHODS[backend]`` (:data:`ODE_METHODS`, the default first):

            =========  ==============================================================
            diffrax    ``Kvaerno5`` (default), ``Kvaerno3`` (implicit); ``Tsit5``,
                       ``Dopri8``, ``Dopri5`` (explicit)
            scipy      ``Radau`` (default), ``BDF``, ``LSODA`` (implicit: get the
                       system's Jacobian); ``RK45``, ``DOP853``, ``RK23`` (explicit)
            numba      ``auto`` (default: DOP853 while non-stiff, else scipy
                       LSODA), ``DOP853`` (explicit)
            =========  ==============================================================
    rtol, atol: tolerances (default 1e-8, 1e-10); max_steps: diffrax step budget (default 1e6).

    Returns a Trajectory with one variable per state and per observable.
    Raises :class:`SolverError` (with ``.partial``) when the solver fails or leaves finite values.
    """
    config = None
    if backend is None:  # stiffness-aware by default; a method of another backend names that backend
        backend = next((b for b in BACKENDS if method is not None and method in ODE_METHODS[b]), "numba")
    if isinstance(system, Problem):
        problem = system
        config = problem.config
        opts = problem.options(backend)
        system = problem.system
        params = problem.params if params is None else params
        y0 = problem.y0 if y0 is None else y0
        t = problem.t if t is None else t
        rtol = opts.get("rtol") if rtol is None else rtol
        atol = opts.get("atol") if atol is None else atol
        method = opts.get("method") if method is None else method
        max_steps = opts.get("max_steps") if max_steps is None else max_steps
    if params is None or y0 is None or t is None:
        raise ConfigError("problem", "give a Problem, or a system with params, y0 and t")
    rtol = 1e-8 if rtol is None else rtol
    atol = 1e-10 if atol is None else atol
    max_steps = 1_000_000 if max_steps is None else max_steps
    check_choice("backend", backend, BACKENDS)
    if not (rtol > 0 and atol > 0):
        raise ConfigError("rtol", "tolerances must be > 0")
    ts = check_times(t)
    p = system.parameter_vector(params)
    if not np.all(np.isfinite(p)):
        bad = system.parameter_names[int(np.argmin(np.isfinite(p)))]
        raise ConfigError(bad, "parameter value is not finite")
    y = system.state_vector(y0)
    if not np.all(np.isfinite(y)):
        raise ConfigError("y0", "initial state is not finite")

    method = method or next(iter(ODE_METHODS[backend]))
    check_choice("method", method, tuple(ODE_METHODS[backend]))
    used = {}
    if backend == "numba":
        Y, status, message, nfev, used["method_used"] = _solve_numba(system, p, y, ts, method, rtol, atol, max_steps)
    elif backend == "scipy":
        f = system.to_numpy()
        jac_f = None
        if ODE_METHODS["scipy"][method].implicit:
            jac = system.jacobian_numpy()
            jac_f = lambda tt, yy: jac(tt, yy, p)  # noqa: E731
        extra = {"jac": jac_f} if jac_f is not None else {}
        Y, status, message, nfev = _scipy_steps(lambda tt, yy: f(tt, yy, p), ts, y, method, rtol, atol, extra)
    else:
        import diffrax
        import jax.numpy as jnp

        run = diffrax_solver(system, method, float(rtol), float(atol), int(max_steps))
        sol = run(jnp.asarray(y), jnp.asarray(p), jnp.asarray(ts))
        Y = np.array(sol.ys, dtype=np.float64)
        Y[0] = y  # the solution at t[0] is the initial state (diffrax fills it with inf on some failures)
        ok = bool(sol.result == diffrax.RESULTS.successful)
        status, message = (0, "The solver successfully reached the end of the integration interval.") if ok else (
            -1, str(diffrax.RESULTS[sol.result]) if hasattr(diffrax.RESULTS, "__getitem__") else "diffrax solver failed")
        if bool(sol.result == diffrax.RESULTS.event_occurred):
            status, message = -1, f"state left |y| <= {STATE_BOUND:.0e} (diverged)"
        nfev = int(sol.stats.get("num_steps", -1))

    finite = np.all(np.isfinite(Y), axis=1)
    good = int(np.argmin(finite)) if not finite.all() else ts.size
    if good < ts.size and status == 0:
        status, message = -1, f"non-finite state at t={ts[good]:.6g}"
    variables = {n: Y[:good, i] for i, n in enumerate(system.state_names)}
    if observables and good > 0:
        with np.errstate(all="ignore"):
            variables.update(system.observables_numpy()(Y[:good], p))
    traj = make_trajectory(
        ts[:good], variables, paper=system.paper, system=system.name, source="ode", backend=backend,
        parameter_values={**{n: float(v) for n, v in zip(system.parameter_names, p)},
                    "rtol": rtol, "atol": atol, "method": method},
        status=status, message=message, extra_attrs={"n_steps": nfev, **used}, config=config,
    )
    if status != 0:
        t_reached = float(ts[good - 1]) if good > 0 else float(ts[0])
        raise SolverError(system.paper, system.name, t_reached, message, partial=traj)
    return traj


def _solve_numba(system: ReducedSystem, p, y, ts, method: str, rtol: float, atol: float, max_steps: int):
    """The ``numba`` backend: ``(Y, status, message, n_fev, method used)``. ``"auto"``: DOP853
    unless the Jacobian's fastest rate at ``y`` makes the flow stiff over ``ts`` (then, and when
    DOP853 spends :data:`AUTO_EXPLICIT_STEPS` steps, scipy's LSODA from ``ts[0]``)."""
    from . import _numba_ode as N

    run = N.dop853(system)
    if method == "auto":
        limit = AUTO_EXPLICIT_STEPS * AUTO_STABILITY / (ts[-1] - ts[0])  # the rate that would need the budget
        stiff = N.fastest_rate(system, ts[0], y, p, below=limit) > limit
        if not stiff:
            Y, code, _, nfev = run(y, p, ts, rtol, atol, min(max_steps, AUTO_EXPLICIT_STEPS), STATE_BOUND)
            stiff = code == N.BUDGET
        if stiff:
            return (*stiff_fallback(system, ts, y, p, rtol, atol), "LSODA")
    else:
        Y, code, _, nfev = run(y, p, ts, rtol, atol, max_steps, STATE_BOUND)
    status = 0 if code == N.OK else -1
    return Y, status, N.STATUS[code].format(bound=STATE_BOUND), nfev, "DOP853"


def stiff_fallback(system: ReducedSystem, ts, y, p, rtol, atol):
    """The stiff half of ``method="auto"`` (single solves and maps alike): scipy's LSODA from ``ts[0]``
    with the compiled finite-difference Jacobian. Returns :func:`_scipy_steps`' ``(Y, status, message, nfev)``."""
    from . import _numba_ode as N

    f, jac = system.to_numpy(), N.jacobian(system)
    return _scipy_steps(lambda tt, yy: f(tt, yy, p), ts, y, "LSODA", rtol, atol,
                        {"jac": lambda tt, yy: jac(tt, yy, p)})


def _scipy_steps(fun, ts, y0, method, rtol, atol, extra):
    """``solve_ivp``'s stepping loop, kept by hand so that a failure (a non-finite right-hand side or
    Jacobian, which makes scipy raise, or ``|y| > STATE_BOUND``) still returns the output times
    reached. Returns ``(Y (n, dim) NaN after the last good time, status, message, nfev)``."""
    Y = np.full((ts.size, y0.size), np.nan)
    Y[0] = y0
    i, status, message = 1, 0, "The solver successfully reached the end of the integration interval."
    with np.errstate(all="ignore"):
        solver = resolve_ref(ODE_METHODS["scipy"][method].solver)(fun, ts[0], y0, ts[-1], rtol=rtol, atol=atol, **extra)
        while i < ts.size:
            try:
                failure = solver.step()
            except (ValueError, ArithmeticError, np.linalg.LinAlgError) as err:
                status, message = -1, f"{method} stopped after t={solver.t:.6g}: {' '.join(str(err).split())}"
                break
            if solver.status == "failed":
                status, message = -1, f"{method} failed after t={solver.t:.6g}: {failure}"
                break
            if not np.all(np.isfinite(solver.y)) or np.max(np.abs(solver.y)) > STATE_BOUND:
                status, message = -1, f"state left |y| <= {STATE_BOUND:.0e} at t={solver.t:.6g} (diverged)"
                break
            dense = solver.dense_output()
            while i < ts.size and ts[i] <= solver.t:
                Y[i] = dense(ts[i])
                i += 1
    return Y, status, message, int(solver.nfev)


def first_crossing(ds, variable: str, level: float, dim: str = "time") -> np.ndarray | float:
    """First time at which ``variable`` reaches ``level`` (linear interpolation between samples);
    NaN where it never does. Vectorised over any other dims (e.g. ``path``, ``run``)."""
    da = ds[variable].transpose(..., dim)
    t = np.asarray(ds[dim].values, dtype=float)
    Y = np.asarray(da.values, dtype=float)
    flat = Y.reshape(-1, Y.shape[-1])
    out = np.full(flat.shape[0], np.nan)
    for i, row in enumerate(flat):
        above = np.nonzero(row >= level)[0]
        if above.size == 0:
            continue
        j = above[0]
        if j == 0:
            out[i] = t[0]
        else:
            y0, y1 = row[j - 1], row[j]
            out[i] = t[j - 1] + (level - y0) / (y1 - y0) * (t[j] - t[j - 1])
    out = out.reshape(Y.shape[:-1])
    return float(out) if out.ndim == 0 else out
