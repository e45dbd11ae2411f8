"""replayer: replay the resume prefill of a coding-agent session against llama-server builds."""

__version__ = "0.1.0"
