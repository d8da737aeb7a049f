"""The shared vocabulary of gpu-bisect: domain types, errors, paths, metric rules and git access.

A leaf package: it imports none of `bisector`, `db`, `workers` or `kernels`, so each of them can use it.
"""
