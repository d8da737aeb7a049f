"""SQL of the images table (db/schema.py): worker images as steps reported them, one row per image and node.

Called by db/store.py's Store (its images section) with a connection inside the Store's transaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from sqlalchemy import Connection, delete, select, update

from bisector.db.schema import images
from bisector.vocab.domain import ImageInfo

MADE_AS = ("built", "artifact", "copied", "rebuilt")  # how an image came to be on its node (rebuilt: in place of
# a damaged one); a step's "cache" is a reuse of one


def record_images(conn: Connection, infos: Iterable[ImageInfo]) -> None:
    """Insert or refresh each image's row; drop the rows of images their node's LRU cap evicted."""
    for info in infos:
        if info.evicted:
            conn.execute(delete(images).where(images.c.node == info.node, images.c.id.in_(info.evicted)))
        values = _values(info)
        refreshed = update(images).where(images.c.id == info.id, images.c.node == info.node).values(values)
        if conn.execute(refreshed).rowcount == 0:
            conn.execute(images.insert().values({"id": info.id, "node": info.node, "source": "built", **values}))


def list_images(conn: Connection, node: str | None = None) -> list[ImageInfo]:
    query = select(images).order_by(images.c.last_used.desc())
    if node is not None:
        query = query.where(images.c.node == node)
    return [
        ImageInfo(
            id=row.id,
            source=row.source,
            reused=False,
            build_s=row.build_s,
            status=row.status,
            sha=row.sha,
            path=row.path,
            node=row.node,
            size_bytes=row.size_bytes,
            key=json.loads(row.key),
            created=row.created.isoformat(),
            last_used=row.last_used.isoformat(),
            log_tail=row.log_tail,
        )
        for row in conn.execute(query)
    ]


def delete_images(conn: Connection, node: str, ids: Sequence[str]) -> int:
    return conn.execute(delete(images).where(images.c.node == node, images.c.id.in_(list(ids)))).rowcount


def _values(info: ImageInfo) -> dict[str, object]:
    """The row's columns from a step's report of its image. Its source is how the image was made (built, artifact
    or copied from another node; rebuilt where it replaced a damaged one): the step's own source where it made it,
    else what the image's manifest told (info.made_as); a reuse that tells neither keeps the row's (a new row says
    built)."""
    made = "rebuilt" if info.replaced else info.source if info.source in MADE_AS else info.made_as
    made_as = {"source": made} if made in MADE_AS else {}
    return {
        "key": json.dumps(info.key, sort_keys=True),
        "sha": info.sha,
        "path": info.path,
        "size_bytes": info.size_bytes,
        **made_as,
        "build_s": info.build_s,
        "created": _time(info.created),
        "last_used": _time(info.last_used),
        "status": info.status,
        "log_tail": info.log_tail,
    }


def _time(text: str) -> datetime:
    if not text:
        return datetime.now(UTC)
    value = datetime.fromisoformat(text)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
