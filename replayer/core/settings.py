"""The user's settings: one typed model, read from ``settings.json`` and overridden by the environment.

The file is the user's and untrusted: a damaged or mistyped one is reported once and the
defaults apply; an unknown key is kept (another version may use it) but never read. The
remembered replay options (``replay``) are rendered from the option table (``options.to_settings``
/ ``from_settings``), so they hold the CLI's names and defaults, and a refused value is named and left out.
``REPLAYER_THEME``, ``REPLAYER_EXPORT_DIR`` and ``REPLAYER_CALIBRATIONS_FILE`` win over the file,
so tests and CI never depend on, or write to, a user's choices.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from replayer.core import paths

DEFAULT_THEME = "replayer-dark"


class SettingsFile(BaseModel):
    """What ``settings.json`` may hold (validated on its own: the environment must not hide a bad value)."""

    model_config = ConfigDict(extra="ignore")

    theme: str = DEFAULT_THEME
    export_dir: Path | None = None  # where the app writes reports and screenshots
    calibrations_file: Path | None = None  # the lines saved by --calibrate (default: presets.json)
    # the setup's mode as last chosen: a user who replays sessions whole should not pick it for every file
    mode: Literal["resume", "session"] = "resume"
    # the setup's replay options as last started, by option name (``options.to_settings``: only those
    # that differ from the defaults); each value is checked as the CLI checks it when read back
    replay: dict[str, Any] = {}
    # the setup's llama-server flags as a session replay last started with them (checked per build when used)
    server_args: Annotated[str, StringConstraints(max_length=4096, pattern=r"^[^\n\r]*$")] | None = None


class Settings(BaseSettings, SettingsFile):
    model_config = SettingsConfigDict(env_prefix="REPLAYER_", extra="ignore")

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource, dotenv_settings, file_secret_settings):
        return (env_settings, init_settings)  # the environment beats the file (passed as init values)

    def export_folder(self) -> Path:
        return self.export_dir.expanduser() if self.export_dir else paths.export_dir()

    def calibrations_path(self) -> Path:
        return self.calibrations_file.expanduser() if self.calibrations_file else paths.presets_file()


def settings_file() -> Path:
    return paths.config_dir() / "settings.json"


def _file_values() -> tuple[dict[str, Any], str | None]:
    f = settings_file()
    try:
        data = orjson.loads(f.read_bytes()) if f.exists() else {}
    except (OSError, orjson.JSONDecodeError):
        return {}, f"{f} cannot be read"
    if not isinstance(data, dict):
        return {}, f"{f} is not a JSON object"
    return data, None


def load_settings() -> tuple[Settings, str | None]:
    """The settings and, when the file is damaged, why (the defaults apply then)."""
    data, problem = _file_values()
    try:
        SettingsFile.model_validate(data)
        return Settings(**data), problem
    except ValidationError as exc:
        err = exc.errors()[0]
        return Settings(), f"{settings_file()}: {'.'.join(map(str, err['loc']))}: {err['msg']}"


def save_settings(**changes: Any) -> Path:
    """Write ``changes`` into the file, keeping its other keys; a damaged file is replaced."""
    data, _ = _file_values()
    try:
        SettingsFile.model_validate(data)
    except ValidationError:
        data = {}  # a damaged file: start again rather than fail every save
    data.update({k: str(v) if isinstance(v, Path) else v for k, v in changes.items()})
    SettingsFile.model_validate(data)  # never write a file that would not read back
    f = settings_file()
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    return f
