"""Compiled explicit ODE solves: the system's right-hand side and Dormand-Prince 8(5,3) in numba.

The right-hand side is sympy's lambdify of :attr:`~theory.core.ReducedSystem.rhs` to the ``math``
module (the definitions as leading assignments, then common subexpressions), compiled by
``numba.njit``; the stepper is Hairer's DOP853 with scipy's coefficients and step-size control
(``scipy.integrate.DOP853``: same error norm, safety 0.9, factors in [0.2, 10]). Output times are
hit exactly (a step is shortened to end on the next output time), so no interpolant enters the
accuracy. Everything runs in one compiled call per solve — no Python per step — and
:func:`batch` solves many parameter sets in a ``numba.prange`` loop (one thread per core).

A solve stops with a status code (:data:`STATUS`): the step budget ``max_steps`` is how
:func:`simulate.solve`'s ``"auto"`` method detects a stiff flow (an explicit method's step is held
to ``|h lambda| <~ 6`` by the fastest decaying mode) and falls back to a stiff solver.
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp

from theory.core import TIME, ReducedSystem
from theory.errors import ConfigError

__all__ = ["rhs_kernel", "dop853", "batch", "fastest_rate", "jacobian", "STATUS", "OK", "BUDGET", "DIVERGED",
           "STEP_TOO_SMALL"]

OK, BUDGET, DIVERGED, STEP_TOO_SMALL = 0, 1, 2, 3
#: status code -> message (``OK`` is success)
STATUS = {OK: "The solver successfully reached the end of the integration interval.",
          BUDGET: "step budget (max_steps) exhausted", DIVERGED: "state left |y| <= {bound:.0e} (diverged)",
          STEP_TOO_SMALL: "step size fell below its floor (a finite-time blow-up or a discontinuity)"}


def rhs_kernel(system: ReducedSystem):
    """``f(t, y, p, out)`` writing ``dy/dt`` (dim,) into ``out``: a numba function, built once per
    system. ``ConfigError("backend", ...)`` for a system without a symbolic right-hand side."""
    return system.compiled("numba_rhs", lambda: _build_rhs(system))


def _build_rhs(system: ReducedSystem):
    import numba

    if any(isinstance(e, sp.core.function.AppliedUndef) for e in system.rhs):
        raise ConfigError("backend", f"{system.paper}/{system.name} has no symbolic right-hand side to compile; "
                                     "use backend 'diffrax' or 'scipy'")
    return numba.njit(_rhs_source_function(system))


def _rhs_source_function(system: ReducedSystem):
    """``rhs(t, y, p, out)`` in plain Python over scalars (sympy's ``PythonCodePrinter``, ``math``
    functions): states ``y[i]``, parameters ``p[j]``, the definitions as leading assignments, then
    common subexpressions, then ``out[i] = ...`` — no arrays allocated, so numba compiles it to
    straight-line code."""
    from sympy.printing.pycode import PythonCodePrinter

    names = {s: sp.Symbol(f"y_{i}") for i, s in enumerate(system.state)}
    names.update({q: sp.Symbol(f"p_{j}") for j, q in enumerate(system.parameters)})
    names[TIME] = sp.Symbol("t")
    defs = []
    for k, (sym, expr) in enumerate(system.definitions):
        defs.append((sp.Symbol(f"d_{k}"), expr.xreplace(names)))
        names[sym] = defs[-1][0]
    defs = [(d, e.xreplace(names)) for d, e in defs]  # a definition may use an earlier one
    reps, reduced = sp.cse([e.xreplace(names) for e in system.rhs], optimizations="basic",
                           symbols=sp.numbered_symbols("c_"))
    pr = PythonCodePrinter({"fully_qualified_modules": True})
    lines = ["def rhs(t, y, p, out):"]
    lines += [f"    y_{i} = y[{i}]" for i in range(len(system.state))]
    lines += [f"    p_{j} = p[{j}]" for j in range(len(system.parameters))]
    lines += [f"    {pr.doprint(a)} = {pr.doprint(b)}" for a, b in [*defs, *reps]]
    lines += [f"    out[{i}] = {pr.doprint(e)}" for i, e in enumerate(reduced)]
    namespace = {"math": math}
    exec(compile("\n".join(lines), f"<{system.paper}/{system.name} rhs>", "exec"), namespace)
    return namespace["rhs"]


def _tableau():
    """DOP853's coefficients as ``scipy.integrate.DOP853`` holds them: ``(A, B, C, E3, E5)``."""
    from scipy.integrate import DOP853 as d

    return tuple(np.ascontiguousarray(x, dtype=np.float64) for x in (d.A, d.B, d.C, d.E3, d.E5))


def _build_kernel(f):
    """The compiled DOP853 solve of right-hand side ``f``: ``run(y0, p, ts, rtol, atol, max_steps,
    bound, A, B, C, E3, E5, Y) -> (status, n_good, n_steps, n_fev)`` filling ``Y`` (len(ts), dim)."""
    import numba

    @numba.njit(nogil=True)
    def run(y0, p, ts, rtol, atol, max_steps, bound, A, B, C, E3, E5, Y):
        n = y0.size
        ns = B.size
        K = np.empty((ns + 1, n))
        y = y0.copy()
        ynew = np.empty(n)
        ytmp = np.empty(n)
        Y[0, :] = y
        t = ts[0]
        f(t, y, p, K[0])
        nfev = 1
        # initial step (scipy's select_initial_step, Hairer I, II.4)
        d0 = 0.0
        d1 = 0.0
        for i in range(n):
            sc = atol + abs(y[i]) * rtol
            d0 += (y[i] / sc) ** 2
            d1 += (K[0, i] / sc) ** 2
        d0 = math.sqrt(d0 / n)
        d1 = math.sqrt(d1 / n)
        span = ts[-1] - ts[0]
        h0 = 1e-6 if (d0 < 1e-5 or d1 < 1e-5) else 0.01 * d0 / d1
        h0 = min(h0, span)
        for i in range(n):
            ytmp[i] = y[i] + h0 * K[0, i]
        f(t + h0, ytmp, p, K[1])
        nfev += 1
        d2 = 0.0
        for i in range(n):
            d2 += ((K[1, i] - K[0, i]) / (atol + abs(y[i]) * rtol)) ** 2
        d2 = math.sqrt(d2 / n) / h0
        if d1 <= 1e-15 and d2 <= 1e-15:
            h1 = max(1e-6, h0 * 1e-3)
        else:
            h1 = (0.01 / max(d1, d2)) ** (1.0 / 8.0)
        h = min(100 * h0, h1, span)
        hmin = span * 1e-14
        k = 1
        steps = 0
        exponent = -1.0 / 8.0
        while k < ts.size:
            if steps >= max_steps:
                return BUDGET, k, steps, nfev
            t_out = ts[k]
            hs = min(h, t_out - t)
            landing = hs >= t_out - t
            rejected = False
            while True:
                if hs < hmin:
                    return STEP_TOO_SMALL, k, steps, nfev
                for s in range(1, ns):
                    for i in range(n):
                        acc = 0.0
                        for j in range(s):
                            acc += A[s, j] * K[j, i]
                        ytmp[i] = y[i] + hs * acc
                    f(t + C[s] * hs, ytmp, p, K[s])
                for i in range(n):
                    acc = 0.0
                    for j in range(ns):
                        acc += B[j] * K[j, i]
                    ynew[i] = y[i] + hs * acc
                tn = t_out if landing else t + hs
                f(tn, ynew, p, K[ns])
                nfev += ns
                steps += 1
                e5 = 0.0
                e3 = 0.0
                for i in range(n):
                    sc = atol + max(abs(y[i]), abs(ynew[i])) * rtol
                    a5 = 0.0
                    a3 = 0.0
                    for j in range(ns + 1):
                        a5 += E5[j] * K[j, i]
                        a3 += E3[j] * K[j, i]
                    e5 += (a5 / sc) ** 2
                    e3 += (a3 / sc) ** 2
                if e5 == 0.0 and e3 == 0.0:
                    err = 0.0
                else:
                    err = hs * e5 / math.sqrt((e5 + 0.01 * e3) * n)
                if not math.isfinite(err):
                    err = 1e10
                if err < 1.0:
                    factor = 10.0 if err == 0.0 else min(10.0, 0.9 * err ** exponent)
                    if rejected:
                        factor = min(1.0, factor)
                    break
                hs *= max(0.2, 0.9 * err ** exponent)
                landing = False
                rejected = True
                if steps >= max_steps:
                    return BUDGET, k, steps, nfev
            # accepted: a shortened landing step keeps the step proposed before it
            h = max(h, hs * factor) if landing and hs < h else hs * factor
            t = tn
            big = 0.0
            for i in range(n):
                y[i] = ynew[i]
                K[0, i] = K[ns, i]
                big = max(big, abs(y[i]))
            if not big <= bound:
                return DIVERGED, k, steps, nfev
            if landing:
                Y[k, :] = y
                k += 1
        return OK, k, steps, nfev

    return run


def dop853(system: ReducedSystem):
    """The compiled DOP853 solve of ``system`` (built once per system): ``run(y0, p, ts, rtol, atol,
    max_steps, bound) -> (Y (len(ts), dim) NaN after the last output time reached, status, n_steps,
    n_fev)``."""
    kernel = system.compiled("numba_dop853", lambda: _build_kernel(rhs_kernel(system)))
    tab = _tableau()

    def run(y0, p, ts, rtol, atol, max_steps, bound):
        Y = np.full((ts.size, y0.size), np.nan)
        status, good, steps, nfev = kernel(np.ascontiguousarray(y0, dtype=np.float64),
                                           np.ascontiguousarray(p, dtype=np.float64), ts, float(rtol), float(atol),
                                           int(max_steps), float(bound), *tab, Y)
        Y[good:] = np.nan
        return Y, int(status), int(steps), int(nfev)

    return run


def _build_batch(kernel):
    import numba

    @numba.njit(parallel=True)
    def many(Y0, P, ts, rtol, atol, max_steps, bound, A, B, C, E3, E5, Y, status):
        for b in numba.prange(P.shape[0]):
            st, good, _, _ = kernel(Y0[b], P[b], ts, rtol, atol, max_steps, bound, A, B, C, E3, E5, Y[b])
            status[b] = st
            for k in range(good, ts.size):
                for i in range(Y0.shape[1]):
                    Y[b, k, i] = np.nan

    return many


def batch(system: ReducedSystem, Y0: np.ndarray, P: np.ndarray, ts: np.ndarray, rtol: float, atol: float,
          max_steps: int, bound: float) -> tuple[np.ndarray, np.ndarray]:
    """DOP853 from each row of ``Y0`` (B, dim) with each row of ``P`` (B, n_params), in parallel:
    ``(Y (B, len(ts), dim), status (B,))`` (codes of :data:`STATUS`; NaN after a stop)."""
    kernel = system.compiled("numba_dop853", lambda: _build_kernel(rhs_kernel(system)))
    many = system.compiled("numba_dop853_batch", lambda: _build_batch(kernel))
    Y = np.empty((P.shape[0], ts.size, Y0.shape[1]))
    status = np.empty(P.shape[0], dtype=np.int64)
    many(np.ascontiguousarray(Y0, dtype=np.float64), np.ascontiguousarray(P, dtype=np.float64), ts, float(rtol),
         float(atol), int(max_steps), float(bound), *_tableau(), Y, status)
    return Y, status


def jacobian(system: ReducedSystem):
    """``J(t, y, p) -> (dim, dim)``: the Jacobian of the compiled right-hand side by central
    differences (step ``1e-6 max(1, |y_j|)``; ``dim`` pairs of evaluations, no symbolic Jacobian),
    itself compiled (built once per system). What the stiff fallback's LSODA takes as ``jac`` and
    :func:`fastest_rate` reads."""
    kernel = system.compiled("numba_fd_jacobian", lambda: _build_jacobian(rhs_kernel(system)))

    def jac(t, y, p):
        y = np.ascontiguousarray(y, dtype=np.float64)
        J = np.empty((y.size, y.size))
        kernel(float(t), y, np.ascontiguousarray(p, dtype=np.float64), J)
        return J

    return jac


def _build_jacobian(f):
    import numba

    @numba.njit
    def jac(t, y, p, J):
        n = y.size
        fp, fm = np.empty(n), np.empty(n)
        yp, ym = y.copy(), y.copy()
        for j in range(n):
            e = 1e-6 * max(1.0, abs(y[j]))
            yp[j] = y[j] + e
            ym[j] = y[j] - e
            f(t, yp, p, fp)
            f(t, ym, p, fm)
            for i in range(n):
                J[i, j] = (fp[i] - fm[i]) / (2 * e)
            yp[j] = y[j]
            ym[j] = y[j]

    return jac


def fastest_rate(system: ReducedSystem, t: float, y: np.ndarray, p: np.ndarray, below: float = 0.0) -> float:
    """``max |lambda|`` over the eigenvalues of the Jacobian at ``(t, y, p)`` (1/time;
    :func:`jacobian`), ``inf`` where it is not finite. ``below``: when the Jacobian's row-sum norm
    (a bound on every ``|lambda|``) is at most ``below``, that bound is returned without the
    eigenvalues — enough for a caller that only asks whether the rate exceeds ``below``."""
    J = jacobian(system)(t, y, p)
    if not np.all(np.isfinite(J)):
        return math.inf
    bound = float(np.max(np.abs(J).sum(axis=1)))
    if bound <= below:
        return bound
    return float(np.max(np.abs(np.linalg.eigvals(J))))
