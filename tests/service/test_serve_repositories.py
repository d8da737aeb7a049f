"""`bisect serve` names each repository it serves once, however many times the options and the file list it."""

from __future__ import annotations

from pathlib import Path

from service_process import running_service, service_home
from synthetic import write_history


def test_a_repository_in_both_the_options_and_the_config_file_is_served_once(tmp_path: Path) -> None:
    repo = write_history(tmp_path / "repo", ["good", "bad"]).path
    other = "https://example.com/other.git"
    config = tmp_path / "serve.toml"
    config.write_text(f'allow_repos = ["{repo}", "{other}"]\n')
    args = ["--db", f"sqlite:///{tmp_path / 'bisect.db'}", "--config", str(config)]
    args += ["--allow-repo", str(repo), "--allow-repo", f"{repo}/.", "--allow-repo", other]
    with running_service(*args, **service_home(tmp_path / "home")) as service:
        assert service.process is not None
        assert service.process.stderr is not None
        line = next(line for line in service.process.stderr if "repositories:" in line)
    assert line.rstrip("\n").endswith(f"repositories: {repo.resolve()}, {other}")
