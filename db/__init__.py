"""The result store of gpu-bisect: SQLAlchemy tables, Alembic migrations and the Store class."""

from bisector.db.engine import default_db_url
from bisector.db.store import Store
from bisector.vocab.paths import data_dir

__all__ = ["Store", "data_dir", "default_db_url"]
