"""What a changed file is for, by its path: tests and tool settings choose no dispatch whatever their language;
benchmarks, examples and test clients run a library's dispatch rather than make it; a tuning file holds tuned values
even when it is added or removed whole."""

from __future__ import annotations

import re

# Tests in any language: a tests directory, test_*.* and *_test(s).* files (test_gemm.cu, mat_mul_test.cpp).
_TEST_PATH = re.compile(
    r"(^|/)(tests?|testing|unit_?tests?|gtests?)/|(^|/)test_[^/]*\.\w+$|_tests?\.\w+$|(^|/)conftest\.py$|"
    r"(^|/)tests?\.rs$"  # Rust's `mod tests;` file
)
# Benchmark sources: a bench(mark)s directory (Rust's benches/ too), bench_*.* and *_bench(mark).* files.
_BENCHMARK_SOURCE = re.compile(r"(?i)(?:^|/)bench(?:mark)?(?:e?s)?/|(?:^|/)bench(?:mark)?_[^/]*$|_bench(?:mark)?\.\w+$")
# Code a library's users run: examples, experiments and ROCm's test clients.
_USERS_ONLY_PATH = re.compile(r"(?:^|/)(?:examples?|experiments?|clients)/")
# CI, editor and tool settings (any file or directory whose name starts with a dot: .github/, .travis.yml,
# .readthedocs.yaml, .vscode/), documentation's data (docs/: inventories, site settings), conda's environments and
# recipes (conda/) and package or build metadata, by file name.
_TOOLING_CONFIG = re.compile(
    r"(^|/)\.[^/]+(/|$)|(^|/)docs?/|(^|/)conda/|(^|/)(pyproject\.toml|cargo\.toml|package(-lock)?\.json|[tj]sconfig\.json|renovate\.json|"
    r"environment\.ya?ml|meta\.ya?ml|mkdocs\.ya?ml|codecov\.ya?ml|(docker-)?compose\.ya?ml|appveyor\.ya?ml)$"
)
# A word of a path (between / _ . - = , and the ends) that names tuned values. In source code "config" is left
# out: config.h, config.py and the like mostly hold build or program settings, not kernel tuning.
_TUNING_WORD = r"tune|tuned|tuning|tunings|autotune\w*|heuristics?"
_SEPARATED = r"(?:^|[/_.\-=,])(?:{words})(?:[/_.\-=,]|$)"
_TUNING_SOURCE = re.compile(_SEPARATED.format(words=_TUNING_WORD), re.I)
_TUNING_DATA = re.compile(_SEPARATED.format(words=f"{_TUNING_WORD}|configs?|presets?"), re.I)


def is_test_path(path: str) -> bool:
    """A test file or a file under a tests directory."""
    return bool(_TEST_PATH.search(path))


def is_benchmark_source(path: str) -> bool:
    """A benchmark's source (benchmarks/gemm.cu, bench_attention.py, softmax_bench.cpp)."""
    return _BENCHMARK_SOURCE.search(path) is not None


def users_only(path: str) -> bool:
    """Examples, experiments, benchmarks and ROCm's test clients: code a library's users run, not its dispatch."""
    return _USERS_ONLY_PATH.search(path) is not None or is_benchmark_source(path)


def is_tooling_config(path: str) -> bool:
    """CI, editor, tool or package settings (JSON / YAML / TOML that is no tuning file): .github/ workflows,
    .pre-commit-config.yaml, pyproject.toml, package.json, environment.yml, ..."""
    return bool(_TOOLING_CONFIG.search(path.lower()))


def is_tuning_path(path: str, *, data: bool) -> bool:
    """A file whose path says it holds tuned values: a tuning / tuned / autotune / heuristics word in a directory
    or the file name (configs/gfx950-GEMM.json, dispatch/tuning/tuning_scan.cuh); for data files (JSON, YAML,
    TOML) also config(s) and presets."""
    return bool((_TUNING_DATA if data else _TUNING_SOURCE).search(path))
