"""Reports read the store and render one bisect: terminal (rich), Markdown for a PR, JSON for tools, the short
status, and git's bisect-log format.

    BisectReport.load(store, id)     what the store says, with the derived answers (model.py)
    print_text / render_markdown     the whole report, answer first (text.py, markdown.py)
    render_json                      the same as JSON, keys in docs/report-schema.md (json_report.py)
    status_lines                     `bisect status`: state, progress, coordinator, last steps (status.py)
    rendered.render                  any of those as one string, for `bisect report|status` and a server (rendered.py)
    render_git_log / parse_git_log   `bisect log` and `bisect replay` (gitlog.py)
"""

from bisector.report.gitlog import GitLog, GitLogMark, parse_git_log, read_git_log, render_git_log
from bisector.report.json_report import SCHEMA_VERSION, render_json, report_json, steps_json
from bisector.report.markdown import render_markdown
from bisector.report.model import BisectReport
from bisector.report.status import status_lines
from bisector.report.text import REPORT_WIDTH, print_text

__all__ = [
    "REPORT_WIDTH",
    "SCHEMA_VERSION",
    "BisectReport",
    "GitLog",
    "GitLogMark",
    "parse_git_log",
    "print_text",
    "read_git_log",
    "render_git_log",
    "render_json",
    "render_markdown",
    "report_json",
    "status_lines",
    "steps_json",
]
