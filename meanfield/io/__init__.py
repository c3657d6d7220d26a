"""Runs on disk: the HDF5 layout, its writer and its readers."""
