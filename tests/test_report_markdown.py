"""The Markdown report as a PR shows it: a real bisect's report rendered by a CommonMark parser with GitHub's
tables, so a commit subject, an author or a test command is read back as written, whatever it holds."""

from __future__ import annotations

from pathlib import Path

from bisect_helpers import synthetic_spec
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from synthetic import write_history

from bisector.db.store import Store
from bisector.report import BisectReport, render_markdown
from bisector.runner.coordinator import Coordinator
from bisector.runner.wiring import make_executor
from bisector.vocab.domain import BisectStatus

# What a subject may hold that Markdown reads as formatting: a table's separator (also in a code span), an HTML
# tag, emphasis of a Python name and of stars, a strikethrough, an entity, a backslash; and text beyond ASCII.
SUBJECT = r"Fix | std::vector<float> in __init__ (*args, `a|b`) ~~old~~ &lt; C:\temp – größer 修正"
RUN = "bash test.sh | cat; exit ${PIPESTATUS[0]} # `piped`"


def test_subjects_and_the_test_command_read_back_as_written_in_the_rendered_markdown(
    tmp_path: Path, store: Store
) -> None:
    history = write_history(tmp_path / "repo", ["good"] * 4 + ["bad"] * 3, subject_prefix=SUBJECT)
    spec = synthetic_spec(history.path, history.shas[0], history.shas[-1], build=None, run=RUN, explain=False)
    record = Coordinator(store, make_executor, poll_interval_s=0.05).start(spec)
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[4])
    markdown = render_markdown(BisectReport.load(store, record.id))
    parser = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
    html = parser.render(markdown)

    culprit = f"{SUBJECT} 4 (#2004)"
    assert f"<code>{history.shas[4]}</code> {escapeHtml(culprit)}<br />" in html
    assert f"<td>{escapeHtml(culprit)} <strong>&lt;- first bad</strong></td>" in html
    assert f"<td>{escapeHtml(f'{SUBJECT} 3 (#2003)')}</td>" in html
    assert f"The test: <code>{escapeHtml(RUN)}</code>." in html
    tokens = parser.parse(markdown)
    rows: list[int] = []
    for token in tokens:
        if token.type == "tr_open":
            rows.append(0)
        elif token.type in ("td_open", "th_open"):
            rows[-1] += 1
    assert rows.count(4) == 1 + 7  # the range table: its header and every commit, 4 cells each
    assert rows.count(11) == 1 + len(BisectReport.load(store, record.id).steps)  # the steps table, 11 each
