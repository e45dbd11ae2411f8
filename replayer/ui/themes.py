"""Theme files (TOML) → Textual themes, validated with pydantic; bad files become a message.

Built-in themes are the checkout's top-level ``themes/`` (the files users copy to make their
own); the wheel installs them as data files under ``<prefix>/share/replayer/themes``. A user's own go in the config dir's ``themes/``. A file that fails validation is skipped and reported, never fatal.
"""

from __future__ import annotations

import site
import sys
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator
from textual.color import Color, ColorParseError
from textual.theme import Theme

from replayer.core import paths
from replayer.core.reasons import REASONS

def bundled_dir() -> Path:
    """The built-in themes: a checkout's ``themes/`` (an editable install), else where the
    installed wheel put them (its data files: the environment's prefix, or the user base)."""
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "themes").is_dir():
        return checkout / "themes"
    for prefix in (sys.prefix, site.getuserbase()):
        d = Path(prefix) / "share" / "replayer" / "themes"
        if d.is_dir():
            return d
    return Path(sys.prefix) / "share" / "replayer" / "themes"


BUNDLED_DIR = bundled_dir()
REASON_VARS = {r.theme_var: r.colour for r in REASONS}


class ThemeFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    dark: bool = True
    primary: str
    secondary: str | None = None
    accent: str | None = None
    background: str | None = None
    surface: str | None = None
    panel: str | None = None
    foreground: str | None = None
    warning: str | None = None
    error: str | None = None
    success: str | None = None
    variables: dict[str, str] = {}

    @field_validator("primary", "secondary", "accent", "background", "surface", "panel", "foreground",
                     "warning", "error", "success")
    @classmethod
    def _colour(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                Color.parse(v)
            except ColorParseError as exc:
                raise ValueError(f"not a colour: {v!r}") from exc
        return v

    def to_theme(self) -> Theme:
        data = self.model_dump(exclude={"variables"})
        return Theme(**data, variables={**REASON_VARS, **self.variables})


def load_theme_file(path: Path) -> Theme:
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path.name}: {exc}") from None
    try:
        return ThemeFile.model_validate(raw).to_theme()
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise ValueError(f"{path.name}: {where}: {first['msg']}") from None


def load_all(extra_dirs: list[Path] | None = None) -> tuple[list[Theme], list[str]]:
    themes: list[Theme] = []
    errors: list[str] = []
    for d in [BUNDLED_DIR, paths.user_themes_dir(), *(extra_dirs or [])]:
        if not d.is_dir():
            continue
        for f in sorted(d.glob("*.toml")):
            try:
                themes.append(load_theme_file(f))
            except ValueError as exc:
                errors.append(str(exc))
    return themes, errors


def listing() -> dict:
    """The themes ``presets`` lists: built-in ones (from the installed package) and the user's,
    with the folder a user's own go in and any file that failed to load."""
    out = []
    for d, source in ((BUNDLED_DIR, "built in"), (paths.user_themes_dir(), "user")):
        for f in sorted(d.glob("*.toml")) if d.is_dir() else []:
            try:
                out.append({"name": load_theme_file(f).name, "source": source, "file": str(f)})
            except ValueError:
                continue  # reported in "errors"
    return {"themes": out, "user_dir": str(paths.user_themes_dir()), "errors": load_all()[1]}

