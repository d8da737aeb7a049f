"""A file-scope threshold that is no constant (a tunable global) is a row; documentation's data files are no tuning
files (native.py, file_roles.py), on real git histories."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import static_diff

VISITED_CPP = """\
#include "visited.h"

size_t visited_table_hashset_threshold = 500000;
int verbose_level = 0;

std::unique_ptr<VisitedTable> VisitedTable::create(size_t size) {
    size_t local_threshold = 100;
    if (size > visited_table_hashset_threshold) {
        return make_hashset(size, local_threshold);
    }
    return make_array(size);
}
"""

INVENTORY_YAML = "fields:\n  vae_precision: fp32\n"


def test_a_tunable_global_threshold_is_a_row_and_docs_data_is_no_tuning(history: History) -> None:
    history.commit(
        "visited table",
        {"faiss/impl/VisitedTable.cpp": VISITED_CPP, "docs/design/schema_inventory.yaml": INVENTORY_YAML},
    )
    changed = (
        VISITED_CPP.replace("= 500000;", "= 10000000;")
        .replace("verbose_level = 0;", "verbose_level = 1;")
        .replace("local_threshold = 100;", "local_threshold = 200;")
    )
    inventory = INVENTORY_YAML + "  vae_decode_precision: bf16\n"
    sha = history.commit(
        "hash set from 10M entries",
        {"faiss/impl/VisitedTable.cpp": changed, "docs/design/schema_inventory.yaml": inventory},
    )

    rows = sorted((f.file, f.name, f.before, f.after) for f in static_diff(history.path, sha).table_findings)

    # verbose_level names no threshold; local_threshold is a function's local (no const): neither is a row
    assert rows == [("faiss/impl/VisitedTable.cpp", "visited_table_hashset_threshold", "500000", "10000000")]


COMMUNICATE_PY = """\
import os

TIMEOUT_SEC = int(os.environ.get("TUTEL_GLOBAL_TIMEOUT_SEC", 1800))
FAST_A2A = int(os.environ.get("TUTEL_FAST_A2A", 0))
"""


def test_an_env_variable_that_sets_a_timeout_is_no_gate(history: History) -> None:
    history.commit("communicate", {"tutel/__init__.py": "", "tutel/communicate.py": COMMUNICATE_PY})
    changed = COMMUNICATE_PY.replace("1800", "86400").replace('"TUTEL_FAST_A2A", 0', '"TUTEL_FAST_A2A", 1')
    sha = history.commit("longer timeout; fast all-to-all on", {"tutel/communicate.py": changed})

    names = [f.name for f in static_diff(history.path, sha).table_findings]

    assert names == ["TUTEL_FAST_A2A"]
