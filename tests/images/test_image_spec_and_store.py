"""The spec's image settings (flags, bisect.toml, stored JSON) and the store's image rows."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from bisector.core.spec import BisectSpec
from bisector.db.store import Store
from bisector.runner.config import build_spec
from bisector.runner.pipeline import step_request
from bisector.vocab.domain import ImageInfo, StepResult, Verdict
from bisector.vocab.errors import InputError
from bisector.workers.images.key import DEFAULT_MAX_BYTES, ImageRecipe, parse_size


def spec(**values: object) -> BisectSpec:
    return BisectSpec.from_options({"repo": "/r", "good": "a", "bad": "b", "run": "true", **values})


def test_images_are_off_unless_asked_and_round_trip_through_json():
    assert spec().executor.image_recipe() is None
    asked = spec(image="venv", image_inputs=("csrc", "setup.py"), images_max_size="512M")
    assert asked.executor.image_recipe() == ImageRecipe("venv", ("csrc", "setup.py"), 512 << 20)
    assert BisectSpec.from_json(asked.to_json()) == asked
    request = step_request(asked, bisect_id=1, step_id=2, sha="c" * 40, attempt=1, repo="/r",
                                 metric=asked.metric_spec(), log_path="/l")  # fmt: skip
    assert request.image == asked.executor.image_recipe()
    assert step_request(spec(), bisect_id=1, step_id=2, sha="c" * 40, attempt=1, repo="/r",
                               metric=spec().metric_spec(), log_path="/l").image is None  # fmt: skip


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"image": "docker"}, "image must be one of"),
        ({"image": "venv", "image_inputs": ("/etc",)}, "inside the repository"),
        ({"image": "venv", "image_inputs": ("a/../../b",)}, "inside the repository"),
        ({"image": "venv", "images_max_size": "lots"}, "not a size"),
        ({"image": "venv", "images_max_size": "0"}, "not a positive size"),
        ({"image": 1}, "image: expected a string"),
    ],
)
def test_bad_image_settings_are_refused(values: dict[str, object], message: str):
    with pytest.raises(InputError, match=message):
        spec(**values)


def test_sizes():
    assert parse_size("20G") == DEFAULT_MAX_BYTES
    assert parse_size("1.5k") == 1536
    assert parse_size("10GiB") == 10 << 30
    assert parse_size("4096") == 4096


def test_bisect_toml_keys(tmp_path: Path):
    (tmp_path / "bisect.toml").write_text(
        '[bisect]\nimage = "venv"\nimage-inputs = ["python", "csrc"]\nimages_max_size = "1G"\n'
    )
    made = build_spec(tmp_path, {"good": "a", "bad": "b", "run": "true"})
    assert made.executor.image_recipe() == ImageRecipe("venv", ("python", "csrc"), 1 << 30)
    (tmp_path / "bisect.toml").write_text('[bisect]\nimage_inputs = "python"\n')
    with pytest.raises(InputError, match="image_inputs must be a list"):
        build_spec(tmp_path, {"good": "a", "bad": "b", "run": "true"})


def image(image_id: str, **values: object) -> ImageInfo:
    defaults: dict[str, object] = {
        "source": "built", "reused": False, "build_s": 2.5, "sha": "a" * 40, "path": f"/c/{image_id}",
        "node": "n1", "size_bytes": 100, "key": {"recipe": "r"}, "created": "2026-11-30T10:00:00+00:00",
        "last_used": "2026-11-30T10:00:00+00:00",
    }  # fmt: skip
    defaults.update(values)
    return ImageInfo(id=image_id, **defaults)  # type: ignore[arg-type]


def test_finished_steps_record_their_images(store: Store):
    now = datetime.now(UTC)
    bisect_id = store.create_bisect("/r", "a" * 40, "b" * 40, {}, now)
    ids = [store.start_step(bisect_id, "a" * 40, 1, "w", "n1", (), now) for _ in range(3)]
    built = image("img1")
    store.finish_step(ids[0], StepResult(ids[0], "a" * 40, Verdict.GOOD, image=built), now)
    reused = image("img1", source="cache", reused=True, last_used="2026-11-30T11:00:00+00:00")
    store.finish_step(ids[1], StepResult(ids[1], "a" * 40, Verdict.GOOD, image=reused), now)
    store.finish_step(ids[2], StepResult(ids[2], "a" * 40, Verdict.GOOD, image=image("img2", evicted=("img1",))), now)

    assert [s.image for s in store.steps(bisect_id)] == [built.summary(), reused.summary(), image("img2").summary()]
    rows = store.images()
    assert [(r.id, r.node, r.source, r.size_bytes) for r in rows] == [("img2", "n1", "built", 100)]
    assert store.forget_images("n1", ["img2"]) == 1
    assert store.images() == []


def test_an_image_used_again_refreshes_its_row(store: Store):
    now = datetime.now(UTC)
    bisect_id = store.create_bisect("/r", "a" * 40, "b" * 40, {}, now)
    first, second = (store.start_step(bisect_id, "a" * 40, 1, "w", "n1", (), now) for _ in range(2))
    store.finish_step(first, StepResult(first, "a" * 40, Verdict.GOOD, image=image("img1")), now)
    later = image("img1", source="cache", reused=True, last_used="2026-11-30T12:00:00+00:00")
    store.finish_step(second, StepResult(second, "a" * 40, Verdict.GOOD, image=later), now)
    (row,) = store.images("n1")
    assert (row.source, row.last_used) == ("built", "2026-11-30T12:00:00+00:00")


@pytest.mark.parametrize("made_as", ["artifact", "copied"])
def test_a_reused_image_keeps_how_it_was_made_on_its_node(store: Store, made_as: str):
    now = datetime.now(UTC)
    bisect_id = store.create_bisect("/r", "a" * 40, "b" * 40, {}, now)
    first, second = (store.start_step(bisect_id, "a" * 40, 1, "w", "n1", (), now) for _ in range(2))
    store.finish_step(first, StepResult(first, "a" * 40, Verdict.GOOD, image=image("img1", source=made_as)), now)
    (row,) = store.images("n1")
    assert row.source == made_as
    later = image("img1", source="cache", reused=True, last_used="2026-11-30T12:00:00+00:00")
    store.finish_step(second, StepResult(second, "a" * 40, Verdict.GOOD, image=later), now)
    (row,) = store.images("n1")
    assert (row.source, row.last_used) == (made_as, "2026-11-30T12:00:00+00:00")


@pytest.mark.parametrize("made_as", ["built", "artifact", "copied"])
def test_a_reuse_without_a_row_records_how_its_image_was_made(store: Store, made_as: str):
    """The step that made the image left no row (its result was lost, or the row was forgotten): the reuse's row says
    how the image on disk was made, as its manifest tells, not "built"."""
    now = datetime.now(UTC)
    bisect_id = store.create_bisect("/r", "a" * 40, "b" * 40, {}, now)
    step = store.start_step(bisect_id, "a" * 40, 1, "w", "n1", (), now)
    reused = image("img1", source="cache", reused=True, made_as=made_as)
    store.finish_step(step, StepResult(step, "a" * 40, Verdict.GOOD, image=reused), now)
    (row,) = store.images("n1")
    assert row.source == made_as
