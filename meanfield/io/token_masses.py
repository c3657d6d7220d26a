"""Where a particle run keeps the masses of its tokens (a run continued from a grid frame or from a weighted run).

The static dataset :data:`TOKEN_MASSES` ``(n,)``, summing to 1; uniform masses ``1/n`` are not stored.  Files
written before it hold the masses as the root dataset ``weights``, a name that clashed with the weight path of
time-dependent heads (the group ``weights/``, whose arrays a reader keys ``weights/<name>``): a file could not hold
both.  Such files are still read (:func:`stored_token_masses`).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["TOKEN_MASSES", "stored_token_masses"]

#: the static dataset that holds a particle run's token masses
TOKEN_MASSES = "token_masses"
_OLD_TOKEN_MASSES = "weights"


def stored_token_masses(static: Mapping[str, Any]) -> Any | None:
    """The token masses among a run's static arrays.

    Parameters
    ----------
    static : mapping
        The arrays a run wrote once (:attr:`meanfield.Run.static`, :meth:`meanfield.io.runfile.RunReader.static`).

    Returns
    -------
    (n,) array or None
        :data:`TOKEN_MASSES`, else an older file's root ``weights`` dataset; ``None`` for uniform masses.
    """
    if TOKEN_MASSES in static:
        return static[TOKEN_MASSES]
    return static.get(_OLD_TOKEN_MASSES)  # the root dataset only: the weight path's arrays are keyed "weights/<name>"
