"""Environment variables declared as tag types and read through them (MIGraphX's MIGRAPHX_DECLARE_ENV_VAR(X), then
enabled(X{}), disabled(X{}), value_of(X{}, 3), string_value_of(X{})) are env gates like getenv reads."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import FindingKind, explain

TARGET_CPP = """\
MIGRAPHX_DECLARE_ENV_VAR(MIGRAPHX_ENABLE_NHWC);
MIGRAPHX_DECLARE_ENV_VAR(MIGRAPHX_ENABLE_FULL_DYNAMIC);
MIGRAPHX_DECLARE_ENV_VAR(MIGRAPHX_GPU_OPTIMIZE);

std::vector<pass> target::get_passes(context& gctx, const compile_options& options) const
{
    return {
        layout_convolution{.channels_last = enabled(MIGRAPHX_ENABLE_NHWC{})},
        dead_code_elimination{},
        fuse_horizontal{},
        prefuse_ops{&ctx},
    };
}

std::string optimization() { return "-O" + string_value_of(MIGRAPHX_GPU_OPTIMIZE{}, "3"); }
"""


def test_a_tag_read_added_or_with_a_new_default_is_an_env_gate_and_one_kept_is_not(history: History) -> None:
    history.commit("passes", {"src/targets/gpu/target.cpp": TARGET_CPP})
    changed = TARGET_CPP.replace(
        "        fuse_horizontal{},",
        "        enable_pass(disabled(MIGRAPHX_ENABLE_FULL_DYNAMIC{}), fuse_horizontal{}),",
    ).replace('MIGRAPHX_GPU_OPTIMIZE{}, "3")', 'MIGRAPHX_GPU_OPTIMIZE{}, "2")')
    sha = history.commit("no fuse_horizontal for dynamic shapes", {"src/targets/gpu/target.cpp": changed})

    rows = sorted((f.kind, f.name, f.before, f.after) for f in explain(history.path, sha).table_findings)

    assert [(kind, name) for kind, name, _, _ in rows] == [
        (FindingKind.ENV_GATE, "MIGRAPHX_ENABLE_FULL_DYNAMIC"),
        (FindingKind.ENV_GATE, "MIGRAPHX_GPU_OPTIMIZE"),
    ]  # not MIGRAPHX_ENABLE_NHWC: its read is the same
    assert rows[0][2] is None
    assert "disabled(MIGRAPHX_ENABLE_FULL_DYNAMIC{})" in (rows[0][3] or "")
    assert '"3"' in (rows[1][2] or "")
    assert '"2"' in (rows[1][3] or "")
