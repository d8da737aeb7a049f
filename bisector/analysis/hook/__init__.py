"""The directory that kernel_trace_env() puts first on PYTHONPATH: it holds only the sitecustomize hook."""
