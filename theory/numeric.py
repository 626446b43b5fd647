"""From sympy to numbers: the one place expressions become numeric functions
(:func:`compile_expressions`, special functions mapped explicitly for numpy and jax) and jax's
float64 switch (:func:`enable_x64`). A leaf module: :mod:`theory.core`, :mod:`theory.noise` and the
papers' modules all build on it without importing each other.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import sympy as sp

__all__ = ["compile_expressions", "numpy_modules", "jax_modules", "enable_x64"]


def numpy_modules() -> list:
    """Printer modules for ``lambdify(..., numpy)`` with special functions mapped explicitly."""
    import scipy.special as sps

    return [{"erf": sps.erf, "erfinv": sps.erfinv, "LambertW": lambda x: np.real(sps.lambertw(x))}, "numpy"]


def compile_expressions(args, exprs, modules: str = "numpy", *, cse: Any = False) -> Callable:
    """The one place sympy expressions become numeric functions (``sympy.lambdify``): ``args`` the
    argument symbols (or sequences of symbols, unpacked), ``exprs`` an expression or a (nested)
    list of them, ``modules`` ``"numpy"`` (:func:`numpy_modules`) or ``"jax"`` (:func:`jax_modules`):
    special functions mapped explicitly in both. ``cse`` as ``sympy.lambdify``'s. Float64."""
    mods = {"numpy": numpy_modules, "jax": jax_modules}[modules]()
    return sp.lambdify(args, exprs, modules=mods, cse=cse)


def enable_x64() -> None:
    """Switch jax to float64 (theory runs in float64; every jax path of :mod:`theory` and
    :mod:`simulate` calls this before it builds or runs a jax function)."""
    import jax

    jax.config.update("jax_enable_x64", True)


def jax_modules() -> list:
    """Printer modules for jax: map special functions explicitly (``lambdify(..., "jax")`` maps
    ``erf`` to ``math.erf``, which breaks under ``jit``)."""
    import jax.numpy as jnp
    import jax.scipy.special as jsp

    return [{"erf": jsp.erf, "erfinv": jsp.erfinv}, jnp]
