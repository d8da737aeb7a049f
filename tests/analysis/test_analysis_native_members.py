"""C++ constants named by the struct they are members of (native_members.py), on a real git history."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import explain

CONFIG_CU = """\
template <int DKQ, int DV>
struct fattn_config;

template <>
struct fattn_config<128, 128> {
    static constexpr int nbatch_fa = 64;
    static constexpr int nwarps = 4;
};

template <>
struct fattn_config<192, 128> {
    static constexpr int nbatch_fa = 64;
    static constexpr int nwarps = 4;
};

static constexpr int max_batch = 512;
"""


def test_a_member_of_a_config_specialization_is_named_by_it(history: History) -> None:
    history.commit("configs", {"src/fattn.cu": CONFIG_CU})
    changed = CONFIG_CU.replace(
        "struct fattn_config<192, 128> {\n    static constexpr int nbatch_fa = 64;",
        "struct fattn_config<192, 128> {\n    static constexpr int nbatch_fa = 32;",
    ).replace("max_batch = 512", "max_batch = 256")
    sha = history.commit("192-wide heads: smaller KV batches", {"src/fattn.cu": changed})

    assert sorted(f.name for f in explain(history.path, sha).table_findings) == [
        "fattn_config<192, 128>::nbatch_fa",
        "max_batch",
    ]
