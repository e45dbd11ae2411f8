"""llama-server builds: which rules a build number implies, and where its binary lives."""

from replayer.core.builds.catalog import Build, Generation, GENERATIONS, parse_build

__all__ = ["Build", "Generation", "GENERATIONS", "parse_build"]
