"""Sub-commands of the ``meanfield`` CLI that run solvers (registered as entry points)."""
