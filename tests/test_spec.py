"""The spec split by concern, and the one option table it, the click options and bisect.toml derive from."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bisector.cli import main
from bisector.cli.options import option_values
from bisector.core.options import BY_CONFIG_KEY, OPTIONS, ExecutorKind, Form, ImageMode, StrategyName
from bisector.core.spec import BisectSpec
from bisector.runner.config import build_spec, load_config_file
from bisector.vocab.errors import InputError
from bisector.vocab.metric import Direction, NoMetricPolicy
from bisector.vocab.patches import PatchKind

# The spec column of a bisect stored by `bisect start ... --executor inprocess --repeat 2 --env A=1
# --infra-pattern oops --no-explain --term-old fast --term-new slow --strategy noisy --direction lower -- .`
# on main before the spec was split (flat keys, as BisectSpec.to_json wrote them then).
STORED_BY_MAIN = json.loads(
    '{"repo": "/tmp/options_main_repo", "good": "HEAD~8", "bad": "HEAD", "run": "bash test.sh", "build": null, '
    '"metric": null, "metric_json": null, "expect": null, "no_metric": "skip", "workers": 1, "gpus_per_step": 0, '
    '"timeout_s": 3600.0, "env": {"A": "1"}, "all_parents": false, "max_attempts": 3, "infra_patterns": ["oops"], '
    '"executor": "inprocess", "ray_address": null, "resources": {}, "explain": false, "trace_kernels": false, '
    '"minimize": false, "repeat": 2, "max_repeat": null, "noise_band": 0.0, "direction": "lower", '
    '"find_fix": false, "strategy": "noisy", "confirm": null, "term_old": "fast", "term_new": "slow", '
    '"paths": ["."], "image": "none", "image_inputs": [], "images_max_size": "20G"}'
)
# options added after STORED_BY_MAIN, at their defaults
ADDED_SINCE = {
    "verify_endpoints": None,
    "artifact": None,
    "image_template": None,
    "build_ahead": None,
    "prune": "off",
    "link": None,
    "dates": {},
    "cherry_pick": [],
    "patch": [],
    "patches": [],
}


def test_json_stored_by_an_older_version_loads_typed_and_writes_back_the_same():
    spec = BisectSpec.from_json(STORED_BY_MAIN)
    assert (spec.repo, spec.good, spec.bad) == ("/tmp/options_main_repo", "HEAD~8", "HEAD")
    assert spec.test.run == "bash test.sh"
    assert spec.test.env == {"A": "1"}
    assert spec.test.paths == (".",)
    assert spec.test.no_metric is NoMetricPolicy.SKIP
    assert spec.test.infra_patterns == ("oops",)
    assert spec.search.strategy is StrategyName.NOISY
    assert spec.search.direction is Direction.LOWER
    assert spec.search.repeat == 2
    assert spec.search.terms() == ("fast", "slow")
    assert spec.executor.kind is ExecutorKind.INPROCESS
    assert spec.executor.image is ImageMode.NONE
    assert not spec.analysis.explain
    assert spec.to_json() == {**STORED_BY_MAIN, **ADDED_SINCE}
    assert json.loads(json.dumps(spec.to_json())) == {**STORED_BY_MAIN, **ADDED_SINCE}


def test_json_of_older_versions_without_later_keys_loads_with_defaults():
    older = {k: v for k, v in STORED_BY_MAIN.items() if not k.startswith(("term_", "image"))} | {"gone": 1}
    spec = BisectSpec.from_json(older)
    assert spec.search.terms() == ("good", "bad")
    assert spec.executor.image is ImageMode.NONE
    assert spec.executor.images_max_size == "20G"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"strategy": "ternary"}, "--strategy must be one of kary, noisy (got 'ternary')"),
        ({"executor": "slurm"}, "--executor must be one of local, ray, inprocess (got 'slurm')"),
        ({"no_metric": "fail"}, "--no-metric must be one of skip, bad (got 'fail')"),
        ({"direction": 1}, "direction: expected a string or nothing, got int 1"),
        ({"workers": "2"}, "workers: expected a whole number, got str '2'"),
        ({"explain": 1}, "explain: expected true or false, got int 1"),
        ({"timeout_s": True}, "timeout_s: expected a whole number or a number, got bool True"),
        ({"run": None}, "run: expected a string, got NoneType None"),
    ],
)
def test_stored_values_of_the_wrong_type_or_choice_are_refused_in_one_line(change: dict[str, object], message: str):
    with pytest.raises(InputError) as refused:
        BisectSpec.from_json(STORED_BY_MAIN | change)
    assert str(refused.value) == message


def test_an_image_cache_size_that_is_not_a_size_is_refused_naming_its_key_without_an_image(tmp_path: Path):
    """Stored JSON and the API's values (from_json), bisect.toml (build_spec) alike, before any image is used."""
    for value, problem in [("abc", "'abc' is not a size"), ("0", "'0' is not a positive size")]:
        with pytest.raises(InputError, match=rf"^--images-max-size: {problem}"):
            BisectSpec.from_json(STORED_BY_MAIN | {"images_max_size": value})
    (tmp_path / "bisect.toml").write_text('[bisect]\nimages-max-size = "20 gigs"\n')
    with pytest.raises(InputError) as refused:
        build_spec(tmp_path, {"good": "a", "bad": "b", "run": "true"})
    assert str(refused.value).startswith(f"{tmp_path / 'bisect.toml'}: --images-max-size: '20 gigs' is not a size")


def test_a_missing_endpoint_is_refused():
    with pytest.raises(InputError, match="good: missing"):
        BisectSpec.from_json({k: v for k, v in STORED_BY_MAIN.items() if k != "good"})


def test_resume_changes_only_the_executor():
    spec = BisectSpec.from_json(STORED_BY_MAIN)
    moved = spec.with_executor({"executor": "local", "workers": 4, "resources": {"H200": 1}})
    assert (moved.executor.kind, moved.executor.workers, moved.executor.resources) == (
        ExecutorKind.LOCAL,
        4,
        {"H200": 1.0},
    )
    assert (moved.test, moved.search, moved.analysis) == (spec.test, spec.search, spec.analysis)
    with pytest.raises(InputError, match="only the executor settings can change, not repeat"):
        spec.with_executor({"repeat": 3})


def test_images_are_built_ahead_by_default_where_workers_build_venv_images_for_every_way_a_round_can_end():
    def limit(**values: object) -> int:
        return BisectSpec.from_json({**STORED_BY_MAIN, **values}).executor.build_ahead_limit()

    assert limit(executor="local", image="venv") == 2
    assert limit(executor="local", image="venv", workers=2) == 6  # W * (W + 1): a round of 2 ends 3 ways
    assert limit(executor="local", image="venv", workers=8) == 72
    assert limit(executor="local", image="venv", workers=16) == 128  # the most looked for on each pass
    assert limit(executor="local", image="venv", workers=2, build_ahead=6) == 6
    assert limit(executor="local", image="venv", build_ahead=0) == 0
    assert limit(executor="local", image="venv", build_ahead=4) == 4
    assert limit(executor="inprocess", image="venv", build_ahead=1) == 1
    assert limit(executor="local", image="none") == 0
    assert limit(executor="ray", image="venv") == 2  # on the slot's node, beside its step
    assert limit(executor="ray", image="venv", workers=4) == 20
    assert limit(executor="ray", image="venv", build_ahead=3) == 3
    assert limit(executor="inprocess", image="venv") == 0
    with pytest.raises(InputError, match="--build-ahead builds commits' images before their steps: give --image venv"):
        limit(executor="local", image="none", build_ahead=2)
    with pytest.raises(InputError, match=r"--build-ahead must be between 0 and 128 \(got -1\)"):
        limit(executor="local", image="venv", build_ahead=-1)
    with pytest.raises(InputError, match=r"--build-ahead must be between 0 and 128 \(got 129\)"):
        limit(executor="local", image="venv", build_ahead=129)
    local = BisectSpec.from_json({**STORED_BY_MAIN, "executor": "local", "image": "venv", "build_ahead": 4})
    assert local.with_executor({"executor": "ray", "workers": 2}).executor.build_ahead_limit() == 6  # Ray's default
    assert local.with_executor({"workers": 2}).executor.build_ahead_limit() == 4


def test_every_option_is_stored_and_every_flag_and_toml_key_comes_from_the_table():
    assert list(BisectSpec.from_json(STORED_BY_MAIN).to_json()) == [option.name for option in OPTIONS]
    start = main.commands["start"]
    flags = {p.name: p for p in start.params if isinstance(p, click.Option)}
    for option in OPTIONS:
        if option.cli_flag is None:
            # --repo names a directory in the repository; paths follow --; dates are what a dated --good/--bad named;
            # patches, what --cherry-pick and --patch named
            assert option.name in ("repo", "paths", "dates", "patches")
            continue
        param = flags[option.name]
        assert option.cli_flag in param.opts
        # --good and --bad are taken as given more than once only to be refused (bisector/cli/options.py)
        assert param.multiple is (option.form in (Form.REPEATED, Form.PAIRS) or option.name in ("good", "bad"))
        if option.choices is not None:
            assert isinstance(param.type, click.Choice)
            assert list(param.type.choices) == [choice.value for choice in option.choices]
    assert set(flags) - {o.name for o in OPTIONS} == {"notify_url", "db_url", "output_format"}
    stored_only = ("repo", "timeout_s", "dates", "patches")
    assert set(BY_CONFIG_KEY) == {o.name for o in OPTIONS if o.name not in stored_only} | {"timeout"}


def test_bisect_toml_and_flags_merge_into_the_typed_spec(tmp_path: Path):
    (tmp_path / "bisect.toml").write_text(
        '[bisect]\nrun = "bash t.sh"\ntimeout = 60\nenv = { A = "1", B = "2" }\nstrategy = "kary"\n'
        'executor = "inprocess"\nno-metric = "bad"\nexplain = false\n'
    )
    assert load_config_file(tmp_path)["timeout_s"] == 60
    spec = build_spec(tmp_path, {"good": "a", "bad": "b", "env": {"B": "3"}, "workers": 2, "paths": ()})
    assert spec.test.timeout_s == 60.0
    assert isinstance(spec.test.timeout_s, float)
    assert spec.test.env == {"A": "1", "B": "3"}
    assert spec.test.no_metric is NoMetricPolicy.BAD
    assert spec.search.strategy is StrategyName.KARY
    assert (spec.executor.kind, spec.executor.workers) == (ExecutorKind.INPROCESS, 2)
    assert not spec.analysis.explain
    (tmp_path / "bisect.toml").write_text('[bisect]\nstrategy = "ternary"\n')
    with pytest.raises(InputError, match=r"--strategy must be one of kary, noisy \(got 'ternary'\)") as refused:
        build_spec(tmp_path, {"good": "a", "bad": "b", "run": "true"})
    assert str(refused.value).startswith(f"{tmp_path / 'bisect.toml'}: ")  # the file says where to mend it


def test_an_invalid_value_names_the_file_only_when_the_file_gave_it(tmp_path: Path):
    (tmp_path / "bisect.toml").write_text('[bisect]\nenv = { "A B" = "1" }\nrepeat = 3\n')
    with pytest.raises(InputError, match=r"^.*bisect\.toml: --env 'A B': an environment variable's name"):
        build_spec(tmp_path, {"good": "a", "bad": "b", "run": "true"})
    (tmp_path / "bisect.toml").write_text('[bisect]\nrepeat = 3\nbuild = "make"\n')
    with pytest.raises(InputError, match=r"^--repeat must be between 1 and"):  # the flag's value, not the file's
        build_spec(tmp_path, {"good": "a", "bad": "b", "run": "true", "repeat": 0})
    with pytest.raises(InputError, match=r"^--build-ahead must be between"):  # --build is the file's, not this
        build_spec(tmp_path, {"good": "a", "bad": "b", "run": "true", "image": "venv", "build_ahead": 999})


_DATED = {"given": "2026-10-05", "sha": "a" * 40, "committed": "2026-10-05T23:12:00+00:00"}
_PICKED = {"kind": "cherry-pick", "source": "main", "content": "b" * 40}
_PATCHED = {"kind": "patch", "source": "fix.diff", "content": "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"}
_NAME = st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)
_VALID: dict[str, st.SearchStrategy[object]] = {
    "repo": st.just("/r"), "good": _NAME, "bad": _NAME, "run": _NAME, "build": st.none() | _NAME,
    "metric": st.none(), "metric_json": st.none(),
    "expect": st.none(), "no_metric": st.sampled_from(["skip", "bad"]),
    "timeout_s": st.floats(0.1, 1e5), "env": st.dictionaries(_NAME, st.text(max_size=5), max_size=3),
    "infra_patterns": st.lists(st.sampled_from(["oops", "OOM.*"]), max_size=2),
    "paths": st.lists(st.sampled_from(["src", "docs/a"]), max_size=2), "all_parents": st.booleans(),
    "max_attempts": st.integers(1, 100), "repeat": st.integers(1, 10), "max_repeat": st.none() | st.integers(10, 1000),
    "noise_band": st.floats(0, 10), "direction": st.none() | st.just("higher"), "find_fix": st.booleans(),
    "strategy": st.none() | st.sampled_from(["kary", "noisy"]), "confirm": st.none() | st.booleans(),
    "verify_endpoints": st.none() | st.sampled_from(["first", "lazy"]),
    "term_old": st.none() | st.just("fast"), "term_new": st.none() | st.just("slow"),
    "prune": st.sampled_from(["auto", "off"]),
    "executor": st.sampled_from(["local", "ray", "inprocess"]), "workers": st.integers(1, 256),
    "gpus_per_step": st.none() | st.integers(0, 8), "ray_address": st.none() | st.just("ray://head:10001"),
    "resources": st.dictionaries(_NAME, st.floats(0.5, 8), max_size=2), "image": st.sampled_from(["none", "venv"]),
    "image_inputs": st.lists(st.sampled_from(["csrc", "setup.py"]), max_size=2),
    "images_max_size": st.sampled_from(["20G", "512M"]), "artifact": st.none(), "image_template": st.none(),
    "build_ahead": st.none() | st.just(0), "explain": st.booleans(), "trace_kernels": st.booleans(),
    "minimize": st.booleans(), "link": st.none() | st.just("https://ci.example.org/run/1"),
    "dates": st.just({}) | st.just({"good": _DATED}),
    "cherry_pick": st.lists(_NAME, max_size=2), "patch": st.lists(_NAME, max_size=2),
    "patches": st.lists(st.sampled_from([_PICKED, _PATCHED]), max_size=2),
}  # fmt: skip


_METRICS = [{}, {"metric": r"tok/s: ([0-9.]+)", "expect": ">= 4.0"}, {"metric_json": "o.json:a.b", "expect": "> 1"}]


@settings(max_examples=200, deadline=None)
@given(st.fixed_dictionaries(_VALID), st.sampled_from(_METRICS))
def test_any_valid_option_values_round_trip_through_the_stored_json(values: dict[str, object], metric: dict[str, str]):
    assert set(_VALID) == {option.name for option in OPTIONS}  # a new option needs its values here
    values |= metric
    spec = BisectSpec.from_options(values)
    assert spec.to_json() == values
    assert BisectSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec


@settings(max_examples=200, deadline=None)
@given(st.fixed_dictionaries(_VALID), st.sampled_from(_METRICS))
def test_the_start_arguments_of_any_spec_parse_back_to_the_same_spec(values: dict[str, object], metric: dict[str, str]):
    """What a report advises to run again (`bisect start` with a spec's options) makes the same spec; a cherry-pick is
    given by the SHA it read, a patch file by its name as given."""
    spec = BisectSpec.from_options(values | metric)
    with main.commands["start"].make_context("bisect start", spec.start_arguments()) as parsed:
        given = option_values(parsed.params)
    patches = spec.test.patches
    assert given.get("cherry_pick", []) == [p.content for p in patches if p.kind is PatchKind.COMMIT]
    assert given.get("patch", []) == [p.source for p in patches if p.kind is PatchKind.DIFF]
    stored = {"dates": spec.dates, "patches": spec.to_json()["patches"]}  # what `bisect start` reads from git and files
    remade = BisectSpec.from_options(given | stored | {"cherry_pick": spec.test.cherry_pick, "patch": spec.test.patch})
    assert remade == spec
