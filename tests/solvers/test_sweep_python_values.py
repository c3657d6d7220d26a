"""A sweep given as a Python mapping (:func:`meanfield.solvers.sweep.load_sweep`, ``run_sweep``) takes tuples and NumPy
arrays where its TOML form has arrays, and NumPy scalars as values."""
from __future__ import annotations

import json

import numpy as np
import pytest

from meanfield.errors import ConfigError
from meanfield.solvers.sweep import load_sweep, run_sweep

BASE = {"base": {"solver": {"t_final": 0.1, "dt": 0.05, "save_every": 0.1}, "init": {"n": 8}}}


def _cases(sweep):
    return [(case.params, case.config, case.hash) for case in sweep.cases]


@pytest.mark.parametrize("betas", [np.logspace(0, 1, 3), tuple(np.logspace(0, 1, 3).tolist()), list(np.logspace(0, 1, 3))],
                         ids=["logspace", "tuple", "list of np.float64"])
def test_a_grid_of_a_numpy_array_or_a_tuple_is_the_grid_of_its_list(betas):
    # np.logspace had been "grid.model.beta: expected a non-empty list of values", a tuple too, and a list of
    # np.float64 had been written to the case's override as np.float64(1.0) and refused
    listed = load_sweep({**BASE, "grid": {"model.beta": np.logspace(0, 1, 3).tolist()}})
    sweep = load_sweep({**BASE, "grid": {"model.beta": betas}})
    assert _cases(sweep) == _cases(listed) and sweep.definition == listed.definition
    json.dumps(sweep.definition)
    assert all(type(case.params["model.beta"]) is float for case in sweep.cases)


def test_numpy_values_in_cases_set_and_base_are_python_values():
    listed = load_sweep({"base": {"solver": {"t_final": 0.1}, "init": {"n": 8, "kind": "vmf", "mean": [0.0, 0.0, 1.0]}},
                         "set": {"model.d": 3}, "grid": {"init.seed": [0, 1]},
                         "cases": [{"model.beta": 1.0}, {"model.beta": 2.0}]})
    given = load_sweep({"base": {"solver": {"t_final": np.float64(0.1)}, "init": {"n": np.int64(8), "kind": "vmf",
                                                                                   "mean": np.array([0.0, 0.0, 1.0])}},
                        "set": {"model.d": np.int32(3)}, "grid": {"init.seed": np.arange(2)},
                        "cases": ({"model.beta": np.float32(1.0)}, {"model.beta": 2.0})})
    assert _cases(given) == _cases(listed) and given.definition == listed.definition
    json.dumps(given.definition)


@pytest.mark.parametrize("values, words", [
    ("1.0", r"grid\.model\.beta: expected a non-empty list of values, got '1\.0'"),  # a string is no list
    (np.array(2.0), r"grid\.model\.beta: expected a non-empty list of values, got 2\.0"),  # a 0-d array: its scalar
    (np.array([], dtype=float), r"grid\.model\.beta: expected a non-empty list of values"),
    (np.array([1.0, "a"], dtype=object), r"grid\.model\.beta: expected numbers or strings, got a NumPy array of dtype object"),
    ((1.0, 1), r"grid\.model\.beta: lists 1 twice"),
])
def test_a_grid_value_that_is_no_list_of_values_is_refused_naming_it(values, words):
    with pytest.raises(ConfigError, match=words):
        load_sweep({**BASE, "grid": {"model.beta": values}})


def test_run_sweep_runs_a_logspace_grid(tmp_path):
    rows = run_sweep({**BASE, "grid": {"model.beta": np.logspace(0, 1, 2)}}, tmp_path / "sweep", workers=0, quiet=True)
    assert [row["status"] for row in rows] == ["ok", "ok"]
    np.testing.assert_allclose([row["model.beta"] for row in rows], [1.0, 10.0], rtol=1e-15)
    stored = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    assert stored["grid"] == {"model.beta": [1.0, 10.0]}
