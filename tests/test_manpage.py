"""bisect(1)'s ENVIRONMENT and EXIT STATUS against the code: every variable read, every exit code used."""

from __future__ import annotations

import re
from pathlib import Path

from bisect_helpers import run_cli

from bisector.cli import main
from bisector.cli import man as manpage
from bisector.cli.support import EXIT_NO_CULPRIT, EXIT_PAUSED
from bisector.cli.triage import EXIT_REGRESSIONS

ROOT = Path(__file__).resolve().parents[1]
VARIABLE = re.compile(r"[\"'$]((?:BISECT|XDG)_[A-Z0-9_]+)")


def variables_in_code() -> set[str]:
    found: set[str] = set()
    for package in ("bisector", "workers", "db", "vocab"):
        for source in (ROOT / package).rglob("*.py"):
            found.update(VARIABLE.findall(source.read_text(encoding="utf-8")))
    return found


def test_every_environment_variable_the_code_reads_is_in_the_man_page():
    documented = {name for names, _ in manpage.ENVIRONMENT for name in names.split(", ")}
    missing = variables_in_code() - documented - set(manpage.STEP_VARIABLES)
    assert not missing, f"add to bisector/cli/man.py ENVIRONMENT: {sorted(missing)}"
    page = manpage.render_man(main, "0")
    environment = page.split(".SH ENVIRONMENT\n")[1].split(".SH ")[0]
    for name in documented:
        assert f"\\fB{name}\\fR" in environment


def test_the_exit_status_section_names_every_exit_code_the_commands_use():
    codes = [code for code, _ in manpage.EXIT_STATUS]
    assert codes == ["0", "1", "2", "3", "4", "128+N"]
    assert {EXIT_REGRESSIONS, EXIT_NO_CULPRIT, EXIT_PAUSED} == {1, 3, 4}
    page = manpage.render_man(main, "0")
    assert ".SH EXIT STATUS" in page
    assert page.index(".SH EXIT STATUS") < page.index(".SH ENVIRONMENT")


def test_a_page_that_cannot_be_written_is_one_line_and_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "bisect.1"
    done = run_cli("man", "--output", str(missing))
    assert (done.returncode, done.stderr) == (
        2,
        f"bisect: error: cannot write the man page to {missing}: No such file or directory\n",
    )
    written = tmp_path / "bisect.1"
    assert run_cli("man", "--output", str(written)).returncode == 0
    assert written.read_text().startswith(".TH BISECT 1")
