"""Where replayer keeps its files: the only module that asks platformdirs.

Every location can be moved with an environment variable so that tests, CI and users
with unusual setups never write into a home directory they did not choose.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP = "replayer"


def _env_path(var: str) -> Path | None:
    value = os.environ.get(var)
    return Path(value).expanduser() if value else None


def cache_dir() -> Path:
    """Builds, sdists, ccache: large and re-creatable."""
    return _env_path("REPLAYER_CACHE_DIR") or Path(platformdirs.user_cache_dir(APP))


def config_dir() -> Path:
    """Settings, user themes, custom presets."""
    return _env_path("REPLAYER_CONFIG_DIR") or Path(platformdirs.user_config_dir(APP))


def builds_dir() -> Path:
    return _env_path("REPLAYER_BUILDS_DIR") or cache_dir() / "builds"


def tokenizer_cache_dir() -> Path:
    """Tokenizers built from GGUF vocabularies, by content hash: re-creatable, ~5 MB each."""
    return _env_path("REPLAYER_TOKENIZER_CACHE") or cache_dir() / "tokenizers"


def export_dir() -> Path:
    return _env_path("REPLAYER_EXPORT_DIR") or Path(platformdirs.user_documents_dir()) / "replayer"


def presets_file() -> Path:
    return config_dir() / "presets.json"


def user_themes_dir() -> Path:
    return config_dir() / "themes"
