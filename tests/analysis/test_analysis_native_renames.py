"""A C / C++ / CUDA local renamed by a commit is no change in the values that read it (native_renames.py), on real
git histories."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import explain

LAUNCH_CUH = """\
void launch_fattn(Context & ctx, int ntiles_x, int max_blocks) {
    const int ntiles_total = ntiles_x * 4;
    const int tiles_nwaves = (ntiles_total + max_blocks - 1) / max_blocks;
    const int nblocks_stream_k = max_blocks;
    const int nsplit = pick_split_v1(ntiles_x);
    fattn_kernel<<<nblocks_stream_k + tiles_nwaves, 128>>>(ctx, nsplit);
}
"""


def test_a_renamed_local_is_no_change_where_it_is_read(history: History) -> None:
    history.commit("fattn", {"src/fattn-common.cuh": LAUNCH_CUH})
    changed = (
        LAUNCH_CUH.replace("ntiles_total", "ntiles_dst")
        .replace("= max_blocks;", "= std::min(max_blocks, 2*ntiles_dst);")
        .replace("pick_split_v1", "pick_split_v2")
    )
    sha = history.commit(
        "stream-k grid no larger than the tiles; ntiles_total is ntiles_dst", {"src/fattn-common.cuh": changed}
    )

    names = sorted(f.name for f in explain(history.path, sha).table_findings)

    # tiles_nwaves reads the renamed local alone: no row; a call to another function is no rename; the launch's
    # block count nblocks_stream_k is a launch parameter of launch_fattn (native_launch_locals.py)
    assert names == ["launch_fattn", "nsplit"]
