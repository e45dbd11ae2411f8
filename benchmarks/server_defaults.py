"""Refresh replayer/data/server_help.json from every installed build's ``llama-server --help`` and
print the defaults that shape slots and caches, one column per build."""

from __future__ import annotations

from replayer.core.server.help import SETTINGS, SHIPPED, help_for, refresh


def main() -> None:
    builds = refresh(SHIPPED)
    helps = [help_for(b) for b in builds]
    print("| setting | flag | " + " | ".join(f"b{b}" for b in builds) + " |")
    print("|---|---|" + "---|" * len(builds))
    for key, (flag, _) in SETTINGS.items():
        print(f"| {key} | `{flag}` | " + " | ".join(str(h.defaults.get(key)) for h in helps) + " |")


if __name__ == "__main__":
    main()
