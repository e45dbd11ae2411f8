"""Which agent wrote this file: decided from content, not the file name (spec §6).

Every format module's importer rates the file's head; the most confident wins
(``registry.detect``). This module keeps the entry point's name for its callers.
"""

from __future__ import annotations

from pathlib import Path

from replayer.core.session import registry


def detect_format(path: Path) -> str:
    return registry.detect(Path(path))


def __getattr__(name: str):
    if name == "FORMATS":  # the registered format names, in order (found on first use)
        return registry.names()
    raise AttributeError(name)
