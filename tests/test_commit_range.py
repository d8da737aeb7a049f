"""CommitRange: a range's SHAs by position in one text, and the details of its described commits."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bisector.vocab.commit_range import ENDS_SHOWN, WHOLE_RANGE_SHOWN, CommitRange
from bisector.vocab.domain import Commit

SHAS = [f"{i:040x}" for i in range(1, 101)]


def test_positions_both_ways() -> None:
    commits = CommitRange(SHAS[:3])
    commits.extend_text("\n".join(SHAS[3:]))
    assert len(commits) == 100
    assert commits.shas() == SHAS
    assert (commits[0], commits[-1]) == (Commit(0, SHAS[0]), Commit(99, SHAS[99]))
    assert [commits.find(sha) for sha in (SHAS[57], SHAS[57][:12], SHAS[57].upper(), "")] == [57, None, None, None]
    assert commits.position[SHAS[99]] == 99
    assert SHAS[3] in commits
    assert "f" * 40 not in commits.position
    with pytest.raises(KeyError):
        commits.position["f" * 40]
    with pytest.raises(IndexError):
        commits[100]
    assert commits.text(98) == f"{SHAS[98]}\n{SHAS[99]}"


@pytest.mark.parametrize(
    "text",
    [f"{SHAS[0]}\n{SHAS[1][:39]}", f"{SHAS[0][:39]}\n{SHAS[1]}", f"{SHAS[0]}\n", f"\n{SHAS[0]}", f"{SHAS[0]}\n\n"],
)
def test_shas_of_another_length_are_refused(text: str) -> None:
    commits = CommitRange(SHAS[:2])
    with pytest.raises(ValueError, match="one length"):
        commits.extend_text(text)
    assert commits.shas() == SHAS[:2]
    with pytest.raises(ValueError, match="one length"):
        commits.extend(["a" * 64])  # a SHA-256 one after SHA-1 ones


def test_described_commits_come_with_their_details() -> None:
    when = datetime(2026, 1, 2, tzinfo=UTC)
    fix = Commit(7, SHAS[7], "fix (#12)", "Dev <dev@example.com>", when, 12)
    commits = CommitRange(SHAS, [fix, Commit(8, SHAS[8])])  # one not described: nothing to note
    assert commits.commit(SHAS[7]) == fix
    assert commits.described() == [fix]
    assert not commits[8].described
    assert [c.position for c in commits.undescribed([9, 7, 9, 200, 8])] == [8, 9]
    with pytest.raises(ValueError, match="not at position 6"):
        commits.describe([Commit(6, SHAS[7], date=when)])


def test_a_report_shows_all_of_a_short_range_and_part_of_a_long_one() -> None:
    assert CommitRange(SHAS[:WHOLE_RANGE_SHOWN]).shown() == list(range(WHOLE_RANGE_SHOWN))
    ends = [*range(ENDS_SHOWN), *range(100 - ENDS_SHOWN, 100)]
    assert CommitRange(SHAS).shown() == ends
    assert CommitRange(SHAS).shown([50, 60, -1], first_bad=60) == sorted({*ends, 50, 59, 60, 61})
