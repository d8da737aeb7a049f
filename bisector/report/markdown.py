"""The report as Markdown for a PR comment, answer first, in the order of the text report."""

from __future__ import annotations

import re

from bisector.report.model import BisectReport, one_line, patches_line, pr_suffix, unsearched_merge_advice
from bisector.report.pruning import pruning_lines
from bisector.report.resume import LOCAL, Commands
from bisector.report.text import first_bad_mark, fmt_date, fmt_metric, fmt_s, range_rows, untested
from bisector.vocab.domain import BisectStatus, StepPurpose
from bisector.vocab.revdates import describe_date

# What Markdown would read as formatting in plain text (a commit subject, an author, a step's reason): a backslash, a
# backtick, emphasis (`*`, `~`; `_` where it is not inside a word: `__init__`, never `fp8_quant`), an HTML tag or
# entity (`std::vector<float>`, `&lt;`) and a table's cell separator.
_MARKDOWN_SPECIAL = re.compile(r"[\\`*~<&|]|(?<![^\W_])_|_(?![^\W_])")


def md_escape(text: str) -> str:
    """Plain text on one line, shown as written in and outside tables."""
    return _MARKDOWN_SPECIAL.sub(lambda special: "\\" + special.group(), " ".join(text.splitlines()))


def md_code(text: str) -> str:
    """Text shown verbatim in an inline code span on one line (not in a table: a `|` would end its cell), fenced by
    more backticks than it has in a row."""
    text = " ".join(text.splitlines())
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def render_markdown(report: BisectReport, commands: Commands = LOCAL) -> str:
    """commands: how the reader runs the commands the report advises."""
    record = report.record
    old, new = report.terms
    first_bad, last_good = report.commit(record.first_bad), report.commit(record.last_good)
    out = [f"### gpu-bisect #{record.id}: {record.status.value}", ""]
    if record.message and record.status not in (BisectStatus.FOUND, BisectStatus.AMBIGUOUS):
        out += [md_escape(record.message), ""]
    if resume := commands.resume(record):
        out += [f"Resume with {md_code(resume)}.", ""]
    if first_bad is not None:
        label = report.first_bad_words()
        out += [
            f"**{label[0].upper()}{label[1:]}:** `{first_bad.sha}` "
            f"{md_escape(first_bad.subject)}{pr_suffix(first_bad)}  ",
            f"{md_escape(first_bad.author)}, {fmt_date(first_bad.date)}",
            "",
        ]
    if last_good is not None:
        out += [f"**Last {old} commit:** `{last_good.sha}` {md_escape(last_good.subject)}{pr_suffix(last_good)}", ""]
    if first_bad is not None and last_good is not None:
        before, after = fmt_metric(report.metric(last_good.sha)), fmt_metric(report.metric(first_bad.sha))
        if (before, after) != ("-", "-"):
            out += [
                f"**Metric:** {before} at the last {old} commit, **{after}** at the {report.first_bad_words()}.",
                "",
            ]
    if (advice := unsearched_merge_advice(report, commands)) is not None:
        out += [f"**Not searched:** {md_escape(advice[0].words)}; to search them: {md_code(advice[1])}", ""]
    if record.status is BisectStatus.AMBIGUOUS:
        out += [
            f"The first {new} commit is one of:",
            *[f"- `{c.sha[:12]}` {md_escape(c.subject)}" for c in report.suspects()],
            "",
        ]
    spec = report.spec
    given = [f"**{which.capitalize()}:** {md_escape(describe_date(spec.dates[which]))}  " for which in spec.dates]
    if spec.test.patches:
        given.append(f"**Applied on every commit:** {md_code(patches_line(spec))}  ")
    if spec.link:
        given.append(f"**Link:** <{spec.link.replace('<', '%3C').replace('>', '%3E')}>")
    out += [*given, ""] if given else []
    if report.explanation is not None:
        from bisector.analysis import render_markdown as render_markdown_explanation  # only for a bisect that has one

        out += [render_markdown_explanation(report.explanation), ""]  # under its own heading
    out += ["#### Evidence", ""]
    out += [*[f"- {md_escape(line)}" for line in [*report.noise_lines(), *pruning_lines(report)]]]
    out += [f"- {md_escape(report.rule_sentence())} The test: {md_code(report.spec.test.run)}."]
    out += [f"- {md_escape(report.work_sentence())}", ""]
    out += [
        "<details><summary>Steps</summary>",
        "",
        "| # | purpose | position | commit | verdict | metric | worker | GPUs | build | run | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for step in report.steps:
        note = one_line(step.detail) if step.purpose is StepPurpose.MANUAL else ""
        out.append(
            f"| {report.number(step)} | {step.purpose.value} | {report.position_label(step.sha)} | `{step.sha[:12]}` "
            f"| {report.word(step.verdict)} | {fmt_metric(step.metric)} | {step.worker or '-'} "
            f"| {','.join(map(str, step.gpus)) or '-'} | {fmt_s(step.build_s)} | {fmt_s(step.run_s)} "
            f"| {md_escape(note)} |"
        )
    out += ["", "</details>", ""]
    if report.failures:
        out += [f"Failed steps ({len(report.failures)}):", ""]
        for step in report.failures:
            kind = (step.verdict.value if step.verdict else "") + (
                f"/{step.error_kind.value}" if step.error_kind else ""
            )
            reason = md_escape(one_line(step.detail) or "no reason given")
            log = f"log (step id {step.id}) `{step.log_path}`" if step.log_path else "log `none`"
            out.append(f"- step {report.number(step)} at `{step.sha[:12]}` ({kind}): {reason}; {log}")
        out.append("")
    out += [
        "<details><summary>Commits in range</summary>",
        "",
        "| position | commit | verdict | subject |",
        "|---|---|---|---|",
    ]
    for commit in range_rows(report):
        if isinstance(commit, int):
            out.append(f"| ... | | | {untested(commit)} |")
            continue
        state = report.state_of(commit.sha)
        mark = f" **{first_bad_mark(report, commit)}**" if commit.sha == record.first_bad else ""
        out.append(
            f"| {commit.position} | `{commit.sha[:12]}` | {report.word(state) if state else ''} "
            f"| {md_escape(commit.subject)}{mark} |"
        )
    out += ["", "</details>", ""]
    target = report.reproduce_target()
    out += [f"Reproduce `{target.sha[:12]}`, {target.why}, by hand:", "", "```sh", report.reproduce(), "```", ""]
    out += ["or through gpu-bisect (its image, where the bisect used images):", "", "```sh"]
    out += [commands.rerun(record, target.sha), "```", ""]
    return "\n".join(out)
