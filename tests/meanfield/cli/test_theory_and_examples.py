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


def test_examples_refuses_a_dangling_link_and_overwrite_replaces_the_link_not_its_target(tmp_path, capsys):
    # a dangling link had been taken for a free name: the copy followed it and wrote its target, outside DIR
    target, elsewhere = tmp_path / "ex", tmp_path / "elsewhere.toml"
    target.mkdir()
    (target / "default.toml").symlink_to(elsewhere)
    assert main(["examples", str(target)]) == 2
    err = capsys.readouterr().err
    assert "error: DIR" in err and "already holds default.toml" in err
    assert not elsewhere.exists() and [p.name for p in target.iterdir()] == ["default.toml"]
    assert main(["examples", str(target), "--overwrite"]) == 0
    capsys.readouterr()
    assert not elsewhere.exists() and not (target / "default.toml").is_symlink()
    folder = tmp_path / "folder"  # a link to a folder is replaced as well, not written into
    folder.mkdir()
    (target / "jko.toml").unlink()
    (target / "jko.toml").symlink_to(folder)
    assert main(["examples", str(target), "--overwrite"]) == 0
    assert (target / "jko.toml").is_file() and not list(folder.iterdir())


def test_examples_help_names_every_file_it_copies(capsys):
    from meanfield.cli.examples import example_files

    with pytest.raises(SystemExit):
        main(["examples", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    names = [f.name for f in example_files()]
    assert names and all(name in text for name in names)
    assert "nothing is copied unless --overwrite" in text  # it had said existing files are kept (the others copied)


def test_an_example_config_missing_where_it_is_named_points_to_meanfield_examples(tmp_path, monkeypatch, capsys):
    # outside the repository data/default.toml does not exist: the message had said only "file not found"
    import meanfield as mf

    monkeypatch.chdir(tmp_path)
    with pytest.raises(mf.ConfigError, match=r"^config: file not found: data/default.toml \(default.toml is one of the "
                                             r"example configurations: `meanfield examples DIR` copies them"):
        mf.simulate("data/default.toml")
    assert main(["simulate", "data/concentration.toml", "-o", "x.h5"]) == 2
    assert "`meanfield examples DIR`" in capsys.readouterr().err and not (tmp_path / "x.h5").exists()
    with pytest.raises(mf.ConfigError, match=r"^config: file not found: mine.toml$"):  # any other name: no hint
        mf.simulate("mine.toml")


@pytest.mark.parametrize(
    ("lambdas", "beta", "n", "gain"),
    [  # 60-digit mpmath values of Σφ(λ_h) - Hφ(Λ/H)
        ("2,2.6", "1e-6", "100000000", -3.6000124200188505e-23),  # had printed 0.0
        ("0.5,1.5", "1e-6", "100000000", -1.0000015000010116e-22),  # had printed -9.264e-23 (7 % off)
        ("1,1.000000001", "1", "5", -6.5970081071351661e-20),  # had printed 0.0
    ],
)
def test_rates_gain_at_the_round_off_floor_of_the_rates_is_accurate(lambdas, beta, n, gain, capsys):
    # the gain had been early - equal_split: at small beta * spread the difference was round-off, its sign lost
    assert main(["theory", "rates", "--lambdas", lambdas, "--beta", beta, "--n", n]) == 0
    assert float(_kv(capsys.readouterr().out)["superadditivity_gain"]) == pytest.approx(gain, rel=1e-12, abs=0.0)


def test_rates_at_beta_zero_and_where_lambda_c_passes_the_floats(capsys):
    # beta = 0 had been refused though every rate is defined (phi = 2 lambda/n, linear), while 1e-320 printed lambda_c = inf
    for beta in ("0", "1e-320"):
        assert main(["theory", "rates", "--lambdas", "0.5,1.5", "--beta", beta, "--n", "8"]) == 0
        kv = _kv(capsys.readouterr().out)
        assert kv["lambda_c"] == "inf" and kv["mean_in_convex_region"] == "false"
        assert float(kv["early_rate"]) == float(kv["equal_split_rate"]) == 0.5
    assert float(kv["superadditivity_gain"]) <= 0.0 and kv["beta"] == "1e-320"
    assert main(["theory", "rates", "--lambdas", "0.5,1.5", "--beta", "0"]) == 0
    assert _kv(capsys.readouterr().out)["superadditivity_gain"] == "0.0"
    assert main(["theory", "rates", "--lambdas", "0.5,1.5", "--beta", "-1"]) == 2
    assert "error: --beta: must be >= 0" in capsys.readouterr().err


def test_clustering_time_is_registered_where_its_docs_say():
    # the docs had said `meanfield theory` found it through an entry-point group that nothing read or declared
    from meanfield.cli import theory, theory_clustering

    assert theory_clustering.add_subparser in theory.SUBCOMMANDS and not hasattr(theory, "ENTRY_POINT_GROUP")
    for text in (theory_clustering.__doc__, theory_clustering.add_subparser.__doc__):
        assert "entry-point group" not in text
