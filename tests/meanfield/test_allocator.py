"""meanfield.allocator: glibc's malloc keeps freed memory for reuse (counted in page faults, not timed)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

_ROUNDS = textwrap.dedent(
    """
    import resource, sys
    import numpy as np
    if sys.argv[1] == "keep":
        from meanfield.allocator import keep_freed_memory
        assert keep_freed_memory()
    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for round in range(21):  # a Runge-Kutta step's pattern: four 3 MiB arrays made, then freed together
        if round == 1:
            first = faults()
        arrays = [np.ones((1024, 384)) for _ in range(4)]
        del arrays
    print((faults() - first) / 20)
    """
)


def _faults_per_round(mode: str, **env: str) -> float:
    import os

    from meanfield.allocator import _USER_SETTINGS

    # without glibc's malloc variables: dask's LocalCluster leaves MALLOC_TRIM_THRESHOLD_ = 65536 in the environment of
    # the process that made it (a sweep test run earlier in the same test process), and keep_freed_memory() then
    # rightly leaves the settings alone
    clean = {name: value for name, value in os.environ.items() if name not in _USER_SETTINGS}
    result = subprocess.run([sys.executable, "-c", _ROUNDS, mode], capture_output=True, text=True, check=True,
                            env={**clean, **env})
    return float(result.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc: Linux")
def test_freed_arrays_are_reused_without_fresh_page_faults():
    pages = 4 * 1024 * 384 * 8 // 4096  # the four arrays' pages
    if _faults_per_round("plain") < pages / 2:
        pytest.skip("this C library already reuses the freed arrays (not glibc's dynamic thresholds)")
    assert _faults_per_round("keep") < pages / 20  # were faulted in afresh every round


def test_the_users_own_malloc_settings_stand(monkeypatch):
    from meanfield.allocator import keep_freed_memory

    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    assert keep_freed_memory() is False


@pytest.mark.parametrize("value", [2**32, 2**70, -1, 2**31, True, 1.5, "32"])
def test_a_threshold_past_mallopts_int_is_refused(value):
    # ctypes had wrapped 2**32 to 0 (every block then mmapped, the opposite of the intent) and returned True
    from meanfield.allocator import keep_freed_memory

    for name in ("mmap_threshold", "trim_threshold"):
        with pytest.raises(ValueError, match=name):
            keep_freed_memory(**{name: value})


def test_only_malloc_tunables_count_as_the_users_malloc_settings(monkeypatch):
    # any GLIBC_TUNABLES, e.g. glibc.cpu.hwcaps, had turned keep_freed_memory off, though the docstring spoke of malloc's
    from meanfield.allocator import _USER_SETTINGS, _users_malloc_settings

    for name in _USER_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    assert not _users_malloc_settings()
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.cpu.hwcaps=-AVX512F")
    assert not _users_malloc_settings()
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.cpu.hwcaps=-AVX512F:glibc.malloc.trim_threshold=65536")
    assert _users_malloc_settings()
    monkeypatch.delenv("GLIBC_TUNABLES")
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert _users_malloc_settings()
