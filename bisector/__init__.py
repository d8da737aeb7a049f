"""gpu-bisect: git-bisect automation for GPU regressions."""

__version__ = "0.1.0"
