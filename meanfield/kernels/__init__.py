"""Attention kernels: the velocity laws, their compiled implementations, and the numba set-up they share."""
