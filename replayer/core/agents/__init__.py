"""The agents themselves: what an installed agent CLI sends (captured against a local stub model)."""
