"""The safe expression parser of config values (``weights.target``, ``noise.anneal_expr``, ``init.expr``)."""
from __future__ import annotations

import numpy as np
import pytest

from meanfield.errors import ConfigError
from meanfield.expressions import compile_expression

#: values that evaluated to something other than a number (a ufunc, a string, Ellipsis, a tuple) and escaped as
#: TypeError/ValueError tracebacks, or ran for ever (the exact integer power 10**10**10)
BAD = [
    ("cos", "is a function"),
    ("exp + 1", "is a function"),
    ("'abc'", "only real numbers"),
    ("...", "only real numbers"),
    ("None", "only real numbers"),
    ("1j", "only real numbers"),
    ("(t, t)", "Tuple is not allowed"),
    ("where(t > 0)", "takes 3 arguments"),  # one argument: a tuple of indices
    ("cos(t, phi)", "takes 1 argument"),  # a second argument is the ufunc's out: it had written into phi
    ("pi(2)", "is not a function"),
    ("t(2)", "is not a function"),
    ("1 << 40", "LShift is not allowed"),
    # bit operations and matrix products had passed the parser: "3 & 1" gave 1, "~1" -2, "t @ t" failed at evaluation
    ("3 & 1", "joins comparisons only"),
    ("(t > 0) | 1", "joins comparisons only"),
    ("~1", "Invert is not allowed"),
    ("~(t > 0)", "Invert is not allowed"),
    ("t ^ t", "BitXor is not allowed"),
    ("t @ t", "MatMult is not allowed"),
    ("10**10**10", "overflows"),
    ("9**9**9**9", "overflows"),
    ("((1 < 2) + (1 < 2))**((1 < 2) + (1 < 2))**100", "overflows"),  # integers from comparisons of constants
    ("0x" + "f" * 400, "past the floating-point range"),
    ("(-1)**0.5", "does not give a real number"),
    ("-" * 100000 + "1", "cannot parse"),
]


@pytest.mark.parametrize(("expr", "words"), BAD)
def test_a_bad_expression_is_a_config_error_naming_the_key(expr, words):
    with pytest.raises(ConfigError, match="^k: ") as info:
        compile_expression(expr, variables=("t", "phi"), key="k")(t=0.5, phi=np.zeros(3))
    assert words in str(info.value)


@pytest.mark.parametrize(("expr", "value"), [
    ("2 + 1.5*cos(t + phi)", 2 + 1.5 * np.cos(0.5)),
    ("t**2", 0.25),
    ("2**-1", 0.5),
    ("(-2)**2", 4.0),
    ("where(t > 1, 1, 2)", 2.0),
    ("clip(t, 0, 0.25)", 0.25),
    ("arctan2(t, 1) + maximum(t, 0)", np.arctan2(0.5, 1) + 0.5),
    ("(t < 1) & (t > 0)", 1.0),
    ("(t > 1) | (t < 0) & (t < 2)", 0.0),
])
def test_good_expressions_keep_their_values(expr, value):
    out = compile_expression(expr, variables=("t", "phi"), key="k")(t=0.5, phi=np.zeros(3))
    np.testing.assert_allclose(np.broadcast_to(out, (3,)), value, rtol=1e-15)
    phi = np.array([0.0, 1.0])  # an array variable is not written to
    compile_expression("cos(t + phi)", variables=("t", "phi"), key="k")(t=0.5, phi=phi)
    np.testing.assert_array_equal(phi, [0.0, 1.0])


@pytest.mark.parametrize("expr", ["cos", "'abc'", "10**10**10", "where(t > 0)"])
def test_a_bad_noise_schedule_expression_names_its_key(expr):
    from meanfield.noise import NoiseSchedule

    with pytest.raises(ConfigError, match="^noise.anneal_expr: "):
        NoiseSchedule(gamma=1.0, anneal="expression", anneal_expr=expr, t_check=1.0)


@pytest.mark.parametrize(("expr", "at"), [("1/t", 0.0), ("t**0.5", -1.0), ("log(t)", 0.0), ("(t < 1) + (t < 1)", 0.0),
                                          ("exp(t)", 1000.0), ("t // 0", 1.0)])
def test_a_variable_gives_the_same_value_as_a_python_float_a_numpy_float_and_an_array(expr, at):
    # 1/t at t = 0.0 had been a ConfigError (float division by zero) and inf at np.float64(0.0); t**0.5 at -1.0 a
    # complex number, refused, and nan at np.float64(-1.0); (t < 1) + (t < 1) 2 and True (found in review)
    f = compile_expression(expr, variables=("t",), key="k")
    values = [f(t=at), f(t=np.float64(at)), f(t=np.array([at]))[0]]
    assert len({repr(float(v)) for v in values}) == 1, values
    assert isinstance(values[0], np.generic)


@pytest.mark.parametrize(("expr", "values"), [
    ("(t > 1) + (t > 2)", [0.0, 1.0, 2.0]),  # a count of conditions: NumPy's booleans had added as "or" (1 at t = 3)
    ("(t > 1) - (t > 2)", [0.0, 1.0, 0.0]),  # NumPy refuses to subtract booleans
    ("-(t > 1)", [0.0, -1.0, -1.0]),
    ("gamma * ((t > 1) + (t > 2) + 1)", [2.0, 4.0, 6.0]),  # an anneal_expr: 3γ at t = 3 had been 2γ
    ("((t > 0) & (t < 5)) * 2", [2.0, 2.0, 2.0]),  # & of conditions still joins them
    ("where((t > 2) | (t < 1), 1, 2)", [1.0, 2.0, 1.0]),
])
def test_conditions_used_as_numbers_count_as_0_and_1_for_scalars_and_arrays(expr, values):
    f = compile_expression(expr, variables=("t", "gamma"), key="k")
    times = [0.5, 1.5, 3.0]
    np.testing.assert_array_equal([float(f(t=t, gamma=2.0)) for t in times], values)  # (weights.target: one t at a time)
    np.testing.assert_array_equal(np.broadcast_to(f(t=np.array(times), gamma=2.0), (3,)), values)
