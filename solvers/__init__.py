"""Solvers for the mean-field transformer dynamics: particles, grid, JKO, and the run loop."""
