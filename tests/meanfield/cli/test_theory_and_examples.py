"""``meanfield theory``, ``meanfield examples``: the statements they print at the edges of their inputs."""
from __future__ import annotations

import math

import pytest

from meanfield.cli import main


def _kv(text: str) -> dict[str, str]:
    return dict(line.split(" = ", 1) for line in text.strip().splitlines())


@pytest.mark.parametrize(("heads", "n"), [("2", "2"), ("5", "16")])
def test_beta_star_negative_past_the_floats_is_no_positive_beta(heads, n, capsys):
    # β* < 0 overflows to -inf at α = 1e-310: monotone_for had said "all finite beta", the opposite of the truth
    assert main(["theory", "beta-star", "--heads", heads, "--n", n, "--alpha", "1e-310"]) == 0
    kv = _kv(capsys.readouterr().out)
    assert float(kv["beta_star"]) == -math.inf
    assert kv["monotone_for"].startswith("no beta > 0 by Thm 19's sufficient criterion")
