"""Settings for a test: a fresh SQLite file, a known bearer token, nothing read from .env; LoCoMo's location."""

from __future__ import annotations

import os
from pathlib import Path

from models.api import Message
from models.settings import Settings
from services import importers

TOKEN = "test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# LoCoMo (see README, "Tests"): `shared/bench/data/locomo_dev.json` beside the checkout, or PYRAMIND_LOCOMO
LOCOMO = Path(
    os.environ.get("PYRAMIND_LOCOMO")
    or Path(__file__).resolve().parents[3] / "shared" / "bench" / "data" / "locomo_dev.json"
)


def make_settings(tmp_path: Path, **overrides: object) -> Settings:
    """Settings for a test: a fresh SQLite file, a known bearer token, nothing read from .env."""
    values: dict[str, object] = {"local_db_path": tmp_path / "pyramind.db", "bearer_token": TOKEN}
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[arg-type]


def locomo_sessions(sample: dict, limit: int | None = None) -> list[list[Message]]:
    """The sample's sessions in time order as Message lists (id = dia_id, time = the session's date)."""
    return [batch.messages for batch in importers.locomo_sessions(sample)][:limit]
