"""The causal mask (Karagodin, Polyanskiy and Rigollet, arXiv 2411.04990): every kernel and backend
against a direct NumPy transcription with ``np.tril``, the first token's row, runs, config and CLI."""
from __future__ import annotations

import numpy as np
import pytest

import meanfield as mf
from meanfield.cli import main
from meanfield.config import load_config
from meanfield.errors import ConfigError
from meanfield.geometry.sphere import sample_uniform
from meanfield.heads import HeadStack
from meanfield.kernels.attention import ATTENTION_KINDS, attention_velocity, velocity_blas, velocity_fused, velocity_numba, velocity_numpy
from meanfield.kernels.harmonic import choose_sphere_method, velocity_harmonic
from meanfield.kernels.local import velocity_local


def causal_transcription(x, heads, beta, kind, a):
    """The four laws over j ≤ i, written with full score matrices and ``np.tril`` (small n only)."""
    n = x.shape[0]
    keep = np.tril(np.ones((n, n), dtype=bool))
    nums, dens = [], []
    out = np.zeros_like(x)
    for h in range(heads.H):
        s = x @ heads.B[h] @ x.T
        vx = x @ heads.V[h].T
        if kind == "relu":
            out += (np.where(keep, np.maximum(s, 0.0), 0.0) * a) @ vx
            continue
        z = np.where(keep, beta * s, -np.inf)
        top = z.max(axis=1, keepdims=True) if kind in ("softmax", "pooled") else 0.0
        e = np.exp(z - top) * a
        if kind == "unnormalized":
            out += e @ vx
        elif kind == "softmax":
            out += (e @ vx) / e.sum(axis=1, keepdims=True)
        else:
            nums.append(heads.w[h] * (e @ vx))
            dens.append((heads.w[h] * e.sum(axis=1, keepdims=True), top))
    if kind == "pooled":  # common shift over the heads
        tops = np.concatenate([t for _, t in dens], axis=1)
        ref = tops.max(axis=1, keepdims=True)
        scale = [np.exp(t - ref) for _, t in dens]
        num = sum(scale[h] * nums[h] for h in range(heads.H))
        den = sum(scale[h] * dens[h][0] for h in range(heads.H))
        out = num / den
    return out


def random_heads(rng, H, d, scale=1.0):
    return HeadStack(B=scale * rng.standard_normal((H, d, d)), V=rng.standard_normal((H, d, d)), w=rng.uniform(0.2, 1.0, H))


def masses(rng, n):
    a = rng.uniform(0.0, 1.0, n)
    a[1::7] = 0.0  # empty cells (the first token keeps a mass: its prefix is itself)
    return a / a.sum()


def close(value, reference, rtol):
    np.testing.assert_allclose(value, reference, rtol=rtol, atol=rtol * np.abs(reference).max())


@pytest.mark.parametrize("kind", ATTENTION_KINDS)
def test_the_transcription_is_the_mask_written_out(rng, kind):
    # row i of the transcription is the unmasked law of the first i + 1 tokens (a closed form of the mask)
    x = sample_uniform(12, 3, seed=2)
    heads = random_heads(rng, 2, 3)
    a = rng.uniform(0.1, 1.0, 12)
    full = causal_transcription(x, heads, 1.3, kind, a)
    for i in (0, 5, 11):
        prefix = velocity_numpy(x[: i + 1], heads, beta=1.3, kind=kind, weights=a[: i + 1])
        close(full[i], prefix[i], 1e-12)


@pytest.mark.parametrize("kind", ATTENTION_KINDS)
@pytest.mark.parametrize("H", [1, 3])
@pytest.mark.parametrize("weighted", [False, True], ids=["uniform", "masses"])
def test_dense_kernels_match_the_transcription(rng, kind, H, weighted):
    d, n = 5, 700  # several BLAS row blocks, several fused chunks
    x = sample_uniform(n, d, seed=H)
    heads = random_heads(rng, H, d)
    a = masses(rng, n) if weighted else None
    reference = causal_transcription(x, heads, 2.5, kind, np.full(n, 1.0 / n) if a is None else a)
    kernels = {"numpy": velocity_numpy, "numba": velocity_numba, "blas": velocity_blas}
    if kind == "softmax":
        kernels["fused"] = lambda x, heads, **kw: velocity_fused(x, heads, beta=kw["beta"], weights=kw["weights"], mask=kw["mask"])
    for name, kernel in kernels.items():
        close(kernel(x, heads, beta=2.5, kind=kind, weights=a, mask="causal"), reference, 1e-11)
    close(velocity_blas(x, heads, beta=2.5, kind=kind, weights=a, mask="causal", precision="float32"), reference, 3e-5)
    for backend in ("auto", "numpy", "numba", "blas") + (("fused",) if kind == "softmax" else ()):
        close(attention_velocity(x, heads, beta=2.5, kind=kind, weights=a, backend=backend, mask="causal"), reference, 1e-11)


def test_fused_and_blas_keep_a_loose_shift_causal(rng):
    # indefinite B at large beta: the Cauchy–Schwarz shift overshoots, rows are redone exactly (over j ≤ i)
    B = np.diag([40.0, -40.0, 1.0])
    heads = HeadStack(B=B[None], V=np.eye(3)[None])
    x = sample_uniform(300, 3, seed=3)
    x[:, 0] *= 1e-3
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    reference = causal_transcription(x, heads, 30.0, "softmax", np.full(300, 1 / 300))
    close(velocity_fused(x, heads, beta=30.0, mask="causal"), reference, 1e-10)
    close(velocity_blas(x, heads, beta=30.0, mask="causal"), reference, 1e-10)


SPHERE_KINDS = ("softmax", "unnormalized", "pooled")


#: model.tolerance of these checks, relative to max |v| (the kernels run at their default 1e-12)
SPHERE_AGREE = 1e-10


@pytest.mark.parametrize("kind", SPHERE_KINDS)
@pytest.mark.parametrize("H", [1, 3])
def test_sphere_kernels_match_the_transcription(rng, kind, H):
    n, beta = 600, 4.0
    x = sample_uniform(n, 3, seed=7)
    heads = random_heads(rng, H, 3)
    for a in (None, masses(rng, n)) if H == 1 else (masses(rng, n),):  # three heads: with masses only (time)
        reference = causal_transcription(x, heads, beta, kind, np.full(n, 1.0 / n) if a is None else a)
        close(velocity_local(x, heads, beta=beta, kind=kind, weights=a, mask="causal"), reference, SPHERE_AGREE)
        close(velocity_harmonic(x, heads, beta=beta, kind=kind, weights=a, mask="causal", block=256), reference, SPHERE_AGREE)
        for backend in ("harmonic", "local"):
            close(attention_velocity(x, heads, beta=beta, kind=kind, weights=a, backend=backend, mask="causal"), reference, SPHERE_AGREE)


@pytest.mark.parametrize("kind", SPHERE_KINDS)
def test_sphere_kernels_match_the_transcription_at_low_temperature(rng, kind):
    # beta ||B|| ~ 100: small caps for the local kernel, L ~ 90 for the harmonic one
    n, beta = 600, 64.0
    x = sample_uniform(n, 3, seed=8)
    heads = random_heads(rng, 1, 3, scale=0.5 if kind == "unnormalized" else 1.0)
    a = masses(rng, n)
    reference = causal_transcription(x, heads, beta, kind, a)
    close(velocity_local(x, heads, beta=beta, kind=kind, weights=a, mask="causal"), reference, SPHERE_AGREE)
    close(velocity_harmonic(x, heads, beta=beta, kind=kind, weights=a, mask="causal", block=256), reference, SPHERE_AGREE)
    three = random_heads(rng, 3, 3, scale=0.5 if kind == "unnormalized" else 1.0)
    reference = causal_transcription(x, three, beta, kind, np.full(n, 1.0 / n))
    close(velocity_local(x, three, beta=beta, kind=kind, mask="causal"), reference, SPHERE_AGREE)


@pytest.mark.parametrize("beta", [1000.0, 5000.0])
def test_harmonic_causal_redoes_rows_whose_far_sum_is_at_its_floor(rng, beta):
    # past the first block the far sum came out at its rounding floor (≤ 0): it was dropped with an error of 0, though it
    # outweighed the near sum by e^400 (rows off by 0.67), or the near sum underflowed against its shift (NaN)
    x = rng.standard_normal((300, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    general = random_heads(rng, 2, 3)
    # general heads at β = 5000 (β‖B‖ ≈ 10⁴) need degrees near 10⁴ in every slice: 30 s for 300 tokens, and the
    # same floor test as at β = 1000; the isotropic head reaches the floor at both temperatures in under a second
    for heads in (HeadStack(B=-2 * np.eye(3)[None], V=-np.eye(3)[None]),) + ((general,) if beta <= 1000.0 else ()):
        reference = causal_transcription(x, heads, beta, "softmax", np.full(300, 1.0 / 300))
        close(velocity_harmonic(x, heads, beta=beta, mask="causal", block=256), reference, SPHERE_AGREE)


def test_harmonic_causal_follows_a_looser_tolerance(rng):
    n = 500
    x = sample_uniform(n, 3, seed=9)
    heads = random_heads(rng, 1, 3)
    reference = causal_transcription(x, heads, 16.0, "softmax", np.full(n, 1.0 / n))
    for tol in (1e-6, 1e-9):
        v = velocity_harmonic(x, heads, beta=16.0, mask="causal", tolerance=tol, block=128)
        close(v, reference, 10 * tol)


@pytest.mark.parametrize("beta", [1.0, 1024.0])
def test_auto_picks_a_valid_sphere_backend_under_the_mask(rng, beta):
    n = 2048  # above the dense threshold: auto consults the causal cost models
    x = sample_uniform(n, 3, seed=11)
    heads = random_heads(rng, 1, 3)
    choice = choose_sphere_method(n, beta, heads, mask="causal")
    assert choice in ("dense", "harmonic", "local")
    reference = causal_transcription(x, heads, beta, "softmax", np.full(n, 1.0 / n))
    close(attention_velocity(x, heads, beta=beta, mask="causal"), reference, 1e-10)


@pytest.mark.parametrize("backend", ["auto", "numpy", "numba", "blas", "fused", "harmonic", "local"])
def test_the_first_token_attends_to_itself(rng, backend):
    # p_11 = 1: v_1 = Σ_h V_h x_1, whatever the scores
    x = sample_uniform(40, 3, seed=5)
    heads = random_heads(rng, 3, 3)
    v = attention_velocity(x, heads, beta=3.0, backend=backend, mask="causal")
    np.testing.assert_allclose(v[0], sum(heads.V[h] @ x[0] for h in range(3)), rtol=1e-12, atol=1e-13)


def test_unknown_masks_are_refused():
    x = sample_uniform(8, 3, seed=1)
    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    with pytest.raises(ValueError, match="mask"):
        attention_velocity(x, heads, beta=1.0, mask="future")
    with pytest.raises(ValueError, match="mask"):
        mf.Model(d=3, beta=1.0, mask="future")


CAUSAL_V_IDENTITY = {
    "model": {"d": 3, "beta": 1.0, "mask": "causal", "seed": 3, "heads": [{"Q": "random", "K": "random", "V": "identity"}]},
    "init": {"n": 32, "seed": 2},
    "solver": {"dt": 0.1, "save_every": 10.0},
    "track": {"energy": False},
}


def test_with_v_identity_the_first_token_never_moves_and_the_others_join_it():
    # Theorem 4.1 of Karagodin, Polyanskiy and Rigollet: V = I and any Q, K: one cluster, at x_1
    cfg = {k: dict(v) for k, v in CAUSAL_V_IDENTITY.items()}
    cfg["model"]["beta"] = 0.25
    cfg["solver"]["t_final"] = 60.0
    run = mf.simulate(cfg)
    np.testing.assert_allclose(run.x[:, 0], np.broadcast_to(run.x[0, 0], run.x[:, 0].shape), rtol=0, atol=1e-12)
    start = run.x[0] @ run.x[0, 0]
    final = run.x[-1] @ run.x[-1, 0]
    assert start.min() < 0.0  # spread at first
    np.testing.assert_allclose(final, 1.0, rtol=0, atol=1e-3)


def test_the_mask_changes_the_run():
    # the same run without the mask moves the first token (a check that the key reaches the kernels)
    cfg = {k: dict(v) for k, v in CAUSAL_V_IDENTITY.items()}
    cfg["solver"]["t_final"] = 1.0
    cfg["solver"]["save_every"] = 1.0
    cfg["model"]["mask"] = "none"
    run = mf.simulate(cfg)
    assert np.linalg.norm(run.x[-1, 0] - run.x[0, 0]) > 1e-3


@pytest.mark.parametrize(
    "values",
    [{"solver.kind": "grid"}, {"solver.kind": "jko", "solver.variant": "grid"}, {"solver.kind": "jko"}, {"solver.kind": "zero-temperature"}],
    ids=["grid", "grid-jko", "particle-jko", "zero-temperature"],
)
def test_solvers_without_a_token_order_refuse_the_mask(values):
    with pytest.raises(ConfigError, match="model.mask"):
        load_config(values={"model.mask": "causal", **values})
    load_config(values={"model.mask": "none", **values})  # the same config without the mask is fine


def test_cli_exits_2_for_the_mask_on_the_grid(tmp_path, capsys):
    config = tmp_path / "causal.toml"
    config.write_text('[model]\nmask = "causal"\n[solver]\nkind = "grid"\nt_final = 0.1\n[grid]\ncells = 100\n')
    out = tmp_path / "run.h5"
    assert main(["simulate", str(config), "-o", str(out), "--quiet"]) == 2
    assert "model.mask" in capsys.readouterr().err
    assert not out.exists()
