"""Which changed files can choose dispatch: tests and CI configuration cannot, whatever their language."""

from __future__ import annotations

import re

_TEST_PATH = re.compile(r"(^|/)(tests?|testing)/|(^|/)test_[^/]*\.py$|_test\.py$|(^|/)conftest\.py$")
_CI_CONFIG = re.compile(
    r"^\.(github|gitlab|circleci|buildkite)/|(^|/)\.pre-commit-config\.yaml$|(^|/)\.gitlab-ci\.yml$"
)


def is_test_path(path: str) -> bool:
    """A test file or a file under a tests directory."""
    return bool(_TEST_PATH.search(path))


def is_ci_config(path: str) -> bool:
    """A CI workflow or hook configuration (YAML that is not a tuning file)."""
    return bool(_CI_CONFIG.search(path.lower()))
