"""Textual-free core of replayer.

Everything a user can do headless lives here; the UI only renders what these modules
produce. A test asserts that importing this package never imports textual.
"""
