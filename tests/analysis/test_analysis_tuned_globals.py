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
