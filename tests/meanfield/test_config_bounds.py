"""The documented ranges and defaults of config keys, checked at their edges (README config table, phase section)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from meanfield.config import load_config
from meanfield.errors import ConfigError


@pytest.mark.parametrize(
    "raw",
    [
        {"init": {"kind": "vmf", "kappa": 1e12}},  # "at most 1e12"
        {"init": {"kind": "clusters", "spread": 1e6}},  # "at most 1e6"
        {"solver": {"t_final": 0.0}},  # t_final = 0 is a run of one frame (only the concentration family refuses it)
        {"grid": {"family": "graded", "cells": 200, "refine_centres": [[0.0, 0.0, 1.0]], "refine_factor": 1.0}},  # F = 1: fine spacing equal to the coarse one
        {"phase": {"times": [0.0, 0.5, 1.0]}},
        {"grid": {"cells": 12}},  # "at least 12"
        {"model": {"tolerance": 1e-2}},  # "from 1e-15 to 1e-2"
        {"model": {"tolerance": 1e-15}},
    ],
)
def test_values_at_the_documented_edges_are_taken(raw):
    load_config(raw)


@pytest.mark.parametrize(
    "raw, key",
    [
        ({"init": {"kind": "vmf", "kappa": 1.0000001e12}}, "init.kappa"),
        ({"init": {"kind": "clusters", "spread": 1.0000001e6}}, "init.spread"),
        ({"solver": {"dt": 0.0}}, "solver.dt"),
        ({"phase": {"times": [0.0, 1.0, 1.0]}}, "phase.times"),  # increasing
        ({"phase": {"times": [0.0, 2.0, 1.0]}}, "phase.times"),
        ({"phase": {"betas": [1.0, -1.0]}}, "phase.betas[1]"),
        ({"phase": {"samples": 0}}, "phase.samples"),
        ({"grid": {"cells": 11}}, "grid.cells"),
        ({"model": {"tolerance": 1.0000001e-2}}, "model.tolerance"),
        ({"model": {"tolerance": 0.9999999e-15}}, "model.tolerance"),
    ],
)
def test_values_past_the_documented_edges_name_the_key(raw, key):
    with pytest.raises(ConfigError) as info:
        load_config(raw)
    assert info.value.key == key


def test_phase_defaults_match_the_readme():
    phase = load_config({})["phase"]
    np.testing.assert_allclose(phase["cluster_angle"], math.acos(0.999), rtol=1e-15, atol=0)  # "default arccos 0.999"
    np.testing.assert_allclose(phase["rank_tol"], 1e-3, rtol=1e-15, atol=0)
    assert phase["samples"] == 256


def test_init_min_mass_takes_up_to_its_documented_bound(tmp_path):
    import meanfield as mf

    source = tmp_path / "source.h5"
    mf.simulate({"init": {"n": 8}, "solver": {"t_final": 0.1, "save_every": 0.1}}, out=source)
    run = {"kind": "run", "path": str(source)}
    assert load_config({"init": {**run, "min_mass": 1e-3}})["init"]["min_mass"] == 1e-3  # "at most 1e-3"
    with pytest.raises(ConfigError, match=r"must lie in \[0, 0\.001\]") as info:
        load_config({"init": {**run, "min_mass": 1.0000001e-3}})
    assert info.value.key == "init.min_mass"
