"""The readers' table: the first reader that claims a changed file reads it, and a reader plugged in from a test
reads its own format through the whole static diff (notes for a version it cannot read, no rows for tests)."""

from __future__ import annotations

import configparser

from analysis_history import History

from bisector.analysis import FindingKind, explain
from bisector.analysis.findings import Finding
from bisector.analysis.readers import READERS, FileRows, FileVersions, Reader, UnreadableError, reader_for


def _parse_ini(data: bytes) -> dict[str, str]:
    parser = configparser.ConfigParser()
    try:
        parser.read_string(data.decode("utf-8"))
    except (UnicodeDecodeError, configparser.Error) as exc:
        raise UnreadableError(type(exc).__name__) from None
    return {f"{section}.{key}": value for section in parser.sections() for key, value in parser[section].items()}


def _read_ini(file: FileVersions) -> FileRows:
    old, new = file.parsed(_parse_ini)
    old, new = old or {}, new or {}
    keys = sorted(set(old) | set(new))
    return FileRows(
        [Finding(FindingKind.TUNING_FILE, file.path, key, "", old.get(key), new.get(key)) for key in keys
         if old.get(key) != new.get(key)]
    )  # fmt: skip


INI = Reader("ini", "each changed key of an .ini tuning file", lambda path: path.endswith(".ini"), _read_ini)


def test_a_reader_plugged_in_from_a_test_reads_its_format_through_the_static_diff(history: History) -> None:
    history.commit("tiles", {"tuning/gemm.ini": "[tiles]\nblock_m = 64\nstages = 3\n", "tests/t.ini": "[a]\nb = 1\n"})
    sha = history.commit(
        "retune", {"tuning/gemm.ini": "[tiles]\nblock_m = 128\nstages = 3\n", "tests/t.ini": "[a]\nb = 2\n"}
    )

    assert explain(history.path, sha).findings == ()  # nobody reads .ini files
    rows = explain(history.path, sha, readers=(*READERS, INI)).findings

    assert [(f.kind, f.file, f.name, f.before, f.after) for f in rows] == [
        (FindingKind.TUNING_FILE, "tuning/gemm.ini", "tiles.block_m", "64", "128")
    ]  # tests/t.ini: a test, read by no reader

    broken = history.commit("broken", {"tuning/gemm.ini": "block_m = 256\n"})
    notes = explain(history.path, broken, readers=(*READERS, INI)).findings
    assert [(f.kind, f.name, f.detail) for f in notes] == [
        (FindingKind.NOTE, "not analysed", f"does not parse at {broken[:12]}: MissingSectionHeaderError")
    ]


def test_the_first_reader_that_claims_a_path_reads_it_and_a_claimed_path_it_skips_is_read_by_none() -> None:
    assert [reader_for(path, READERS) for path in ("ops/gemm.py", "CMakeLists.txt", "src/gemm.cu")] == [
        READERS[0],
        next(r for r in READERS if r.name == "cmake"),
        next(r for r in READERS if r.name == "native"),
    ]
    assert reader_for("tests/test_gemm.py", READERS) is None
    assert reader_for(".github/workflows/ci.yml", READERS) is None  # claimed by the tuning reader, which skips it
    anything = Reader("anything", "every file", lambda path: True, _read_ini)
    assert reader_for(".github/workflows/ci.yml", (*READERS, anything)) is None  # not passed on to a later reader
    assert reader_for("ops/gemm.py", (anything, *READERS)) is anything
