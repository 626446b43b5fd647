"""The ReducedSystem abstraction and its exporters.

A paper module derives its reduced gradient flow symbolically (from a loss) and packages it as a
:class:`ReducedSystem`: ordered state symbols, parameter symbols, right-hand sides, optional
diffusion, invariants, closed forms and named observables. Everything downstream (solvers, SDE
ensembles, exporters, the CLI) works from this one object, so that what is integrated is exactly
what was derived.

Exporters: :meth:`ReducedSystem.to_latex`, :meth:`to_python` (self-contained numpy source),
:meth:`to_numpy` / :meth:`to_jax` (callables with the fixed argument order ``f(t, y, p)`` where
``y`` follows ``state`` and ``p`` follows ``parameters``), :meth:`to_json`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import sympy as sp

from .errors import ConfigError

__all__ = [
    "ReducedSystem",
    "ParamsBase",
    "jax_modules",
    "numpy_modules",
    "system_to_json",
    "systems_to_json",
]


def numpy_modules() -> list:
    """Printer modules for ``lambdify(..., numpy)`` with special functions mapped explicitly."""
    import scipy.special as sps

    return [{"erf": sps.erf, "erfinv": sps.erfinv, "LambertW": lambda x: np.real(sps.lambertw(x))}, "numpy"]


def jax_modules() -> list:
    """Printer modules for jax: map special functions explicitly (``lambdify(..., "jax")`` maps
    ``erf`` to ``math.erf``, which breaks under ``jit``)."""
    import jax.numpy as jnp
    import jax.scipy.special as jsp

    return [{"erf": jsp.erf, "erfinv": jsp.erfinv}, jnp]


@dataclass(frozen=True, eq=False)
class ReducedSystem:
    """A reduced gradient-flow system ``dy/dt = rhs(y; p)`` [+ ``diffusion(y; p) dW``].

    Frozen and hashed by identity, so compiled solvers can be cached per system object.

    Attributes
    ----------
    name:        short identifier, e.g. ``"symmetric"``.
    paper:       paper key (``"scb"``).
    state:       ordered state symbols; arrays of states follow this order.
    parameters:  ordered parameter symbols; parameter vectors follow this order.
    rhs:         one sympy expression per state (same order as ``state``).
    diffusion:   optional ``len(state) x m`` sympy Matrix (Ito), ``None`` for an ODE.
    observables: name -> expression of state and parameters; logged under the same names by
                 the empirical side.
    invariants:  name -> expression whose time derivative along the flow is zero (or small).
    closed_forms: name -> expression (of ``t`` and parameters) for known solutions/formulas.
    spec:        the section of ``papers/<paper>.md`` implemented.
    description: one paragraph for humans.
    """

    name: str
    paper: str
    state: tuple[sp.Symbol, ...]
    parameters: tuple[sp.Symbol, ...]
    rhs: tuple[sp.Expr, ...]
    diffusion: sp.Matrix | None = None
    observables: Mapping[str, sp.Expr] = field(default_factory=dict)
    invariants: Mapping[str, sp.Expr] = field(default_factory=dict)
    closed_forms: Mapping[str, sp.Expr] = field(default_factory=dict)
    spec: str = ""
    description: str = ""

    def __post_init__(self):
        if len(self.rhs) != len(self.state):
            raise ValueError(f"{self.name}: {len(self.rhs)} right-hand sides for {len(self.state)} states")
        free = set().union(*(e.free_symbols for e in self.rhs)) if self.rhs else set()
        unknown = free - set(self.state) - set(self.parameters) - {sp.Symbol("t", real=True)}
        if unknown:
            raise ValueError(f"{self.name}: rhs uses undeclared symbols {sorted(map(str, unknown))}")

    # -- basic views ----------------------------------------------------------------------------
    @property
    def state_names(self) -> tuple[str, ...]:
        return tuple(str(s) for s in self.state)

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return tuple(str(s) for s in self.parameters)

    @property
    def rhs_dict(self) -> dict[sp.Symbol, sp.Expr]:
        return dict(zip(self.state, self.rhs))

    def rhs_matrix(self) -> sp.Matrix:
        return sp.Matrix(self.rhs)

    def jacobian(self) -> sp.Matrix:
        return self.rhs_matrix().jacobian(sp.Matrix(self.state))

    def time_derivative(self, expr: sp.Expr) -> sp.Expr:
        """d(expr)/dt along the drift (Lie derivative); zero for an exact invariant."""
        return sum(sp.diff(expr, s) * f for s, f in zip(self.state, self.rhs))

    def parameter_vector(self, values: Mapping[str, float]) -> np.ndarray:
        missing = [n for n in self.parameter_names if n not in values]
        if missing:
            raise ConfigError(missing[0], f"no value given for parameter of system {self.paper}/{self.name}")
        return np.array([float(values[n]) for n in self.parameter_names], dtype=np.float64)

    def state_vector(self, values: Mapping[str, float] | Sequence[float] | np.ndarray) -> np.ndarray:
        if isinstance(values, Mapping):
            missing = [n for n in self.state_names if n not in values]
            if missing:
                raise ConfigError(missing[0], f"no initial value for state of {self.paper}/{self.name}")
            return np.array([float(values[n]) for n in self.state_names], dtype=np.float64)
        arr = np.asarray(values, dtype=np.float64)
        if arr.shape != (len(self.state),):
            raise ConfigError("y0", f"expected {len(self.state)} initial values, got shape {arr.shape}")
        return arr

    # -- exporters ------------------------------------------------------------------------------
    def to_latex(self) -> str:
        """An ``aligned`` block, one line per state: ``\\dot{x} &= ...``."""
        lines = [
            rf"\dot{{{sp.latex(s)}}} &= {sp.latex(f)}" for s, f in zip(self.state, self.rhs)
        ]
        return "\\begin{aligned}\n" + " \\\\\n".join(lines) + "\n\\end{aligned}"

    def latex_dict(self) -> dict[str, str]:
        return {str(s): sp.latex(f) for s, f in zip(self.state, self.rhs)}

    def to_python(self, suffix: str = "") -> str:
        """Self-contained numpy source defining ``rhs(t, y, p)`` and ``observables(y, p)``.

        The source imports only numpy (and scipy.special when needed) so it can be pasted into a
        notebook; argument order follows ``STATE`` / ``PARAMETERS``. ``suffix`` is appended to every
        top-level name (``rhs_general``, ``STATE_general``) so several systems share one module.
        """
        from sympy.printing.numpy import NumPyPrinter

        printer = NumPyPrinter({"fully_qualified_modules": True, "allow_unknown_functions": False})
        head = [
            f'"""Reduced system {self.paper}/{self.name} exported by tdyn ({self.spec})."""',
            "import numpy",
            "import scipy.special",
            "",
            f"STATE{suffix} = {list(self.state_names)!r}",
            f"PARAMETERS{suffix} = {list(self.parameter_names)!r}",
            "",
        ]

        def unpack(indent: str) -> list[str]:
            out = []
            for i, s in enumerate(self.state):
                out.append(f"{indent}{printer.doprint(s)} = y[{i}]")
            for i, s in enumerate(self.parameters):
                out.append(f"{indent}{printer.doprint(s)} = p[{i}]")
            return out

        body = [f"def rhs{suffix}(t, y, p):", f"    \"\"\"dy/dt; y in STATE{suffix} order, p in PARAMETERS{suffix} order.\"\"\""]
        body += unpack("    ")
        subs, reduced = sp.cse(list(self.rhs), optimizations="basic")
        for sym, expr in subs:
            body.append(f"    {printer.doprint(sym)} = {printer.doprint(expr)}")
        body.append("    return numpy.array([")
        for e in reduced:
            body.append(f"        {printer.doprint(e)},")
        body.append("    ], dtype=float)")
        body.append("")
        if self.observables:
            body.append(f"def observables{suffix}(y, p):")
            body.append("    \"\"\"Named observables as a dict of floats.\"\"\"")
            body += unpack("    ")
            body.append("    return {")
            for n, e in self.observables.items():
                body.append(f"        {n!r}: {printer.doprint(e)},")
            body.append("    }")
            body.append("")
        return "\n".join(head + body)

    def _lambdify(self, exprs, modules):
        t = sp.Symbol("t", real=True)
        return sp.lambdify((t, self.state, self.parameters), exprs, modules=modules, cse=True)

    def to_numpy(self) -> Callable[[float, np.ndarray, np.ndarray], np.ndarray]:
        """``f(t, y, p) -> dy/dt`` as a numpy array (float64)."""
        f = self._lambdify(list(self.rhs), numpy_modules())

        def rhs(t, y, p):
            return np.asarray(f(t, y, p), dtype=np.float64).reshape(len(self.state))

        return rhs

    def to_jax(self) -> Callable:
        """``f(t, y, p) -> dy/dt`` traceable by jax (jit/vmap/grad)."""
        import jax.numpy as jnp

        f = self._lambdify(list(self.rhs), jax_modules())

        def rhs(t, y, p):
            out = f(t, y, p)
            return jnp.stack([jnp.broadcast_to(jnp.asarray(o, dtype=y.dtype), ()) for o in out])

        return rhs

    def observables_numpy(self) -> Callable[[np.ndarray, np.ndarray], dict[str, np.ndarray]]:
        """``g(Y, p) -> {name: array}`` vectorised over a leading time axis of ``Y`` (shape (n, d))."""
        names = list(self.observables)
        if not names:
            return lambda Y, p: {}
        t = sp.Symbol("t", real=True)
        f = sp.lambdify((t, self.state, self.parameters), [self.observables[n] for n in names],
                        modules=numpy_modules(), cse=True)

        def obs(Y, p):
            Y = np.asarray(Y, dtype=np.float64)
            cols = tuple(Y[..., i] for i in range(Y.shape[-1]))
            vals = f(0.0, cols, p)
            return {n: np.broadcast_to(np.asarray(v, dtype=np.float64), Y.shape[:-1]).copy()
                    for n, v in zip(names, vals)}

        return obs

    def to_json(self) -> dict[str, Any]:
        """``{"name", "state", "parameters", "rhs": {state: str}, "latex": {state: str}, ...}``."""
        return {
            "name": self.name,
            "spec": self.spec,
            "state": list(self.state_names),
            "parameters": list(self.parameter_names),
            "rhs": {str(s): sp.sstr(f) for s, f in zip(self.state, self.rhs)},
            "latex": self.latex_dict(),
            "observables": {n: sp.sstr(e) for n, e in self.observables.items()},
            "invariants": {n: sp.sstr(e) for n, e in self.invariants.items()},
            "closed_forms": {n: sp.sstr(e) for n, e in self.closed_forms.items()},
        }


def system_to_json(system: ReducedSystem) -> dict[str, Any]:
    return system.to_json()


def systems_to_json(paper: str, systems: Sequence[ReducedSystem]) -> str:
    """The ``tdyn derive PAPER --format json`` document."""
    return json.dumps({"paper": paper, "systems": [s.to_json() for s in systems]}, indent=2)


# ------------------------------------------------------------------------------------------------
# Configuration base
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ParamsBase:
    """Base for a paper's frozen configuration dataclass.

    Subclasses implement :meth:`validate` (raise :class:`ConfigError` naming the field); it runs at
    construction, so an invalid config never exists. :meth:`with_overrides` parses the CLI's
    ``--set key=value`` strings into typed fields.
    """

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:  # pragma: no cover - overridden
        pass

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes) -> "ParamsBase":
        known = {f.name for f in dataclasses.fields(self)}
        for k in changes:
            if k not in known:
                raise ConfigError(k, f"unknown parameter; known: {', '.join(sorted(known))}")
        return dataclasses.replace(self, **changes)

    def with_overrides(self, assignments: Sequence[str]) -> "ParamsBase":
        """Apply ``["key=value", ...]`` with values parsed as Python/JSON literals and coerced to
        the field's type."""
        import ast

        fields = {f.name: f for f in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        for item in assignments:
            if "=" not in item:
                raise ConfigError(item, "expected key=value")
            key, raw = (s.strip() for s in item.split("=", 1))
            if key not in fields:
                raise ConfigError(key, f"unknown parameter; known: {', '.join(sorted(fields))}")
            current = getattr(self, key)
            try:
                value = ast.literal_eval(raw)
            except (ValueError, SyntaxError):
                value = raw
            changes[key] = _coerce(key, value, current)
        return self.replace(**changes)


def _coerce(key: str, value: Any, current: Any) -> Any:
    if isinstance(current, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in {"true", "false", "1", "0", "yes", "no"}:
            return value.lower() in {"true", "1", "yes"}
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise ConfigError(key, f"expected true/false, got {value!r}")
    if isinstance(current, int):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or float(value) != int(value):
            raise ConfigError(key, f"expected an integer, got {value!r}")
        return int(value)
    if isinstance(current, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(key, f"expected a number, got {value!r}")
        return float(value)
    if isinstance(current, str):
        return str(value)
    if isinstance(current, tuple) or current is None:
        if isinstance(value, list):
            return _to_tuple(value)
        return value
    return value


def _to_tuple(v):
    return tuple(_to_tuple(x) for x in v) if isinstance(v, (list, tuple)) else v
