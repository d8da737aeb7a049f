"""Executors and the step runner: where bisect steps run (local processes, Ray, in-process for tests)."""
