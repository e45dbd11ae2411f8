"""The session formats: one module per agent's file (each declares an ``IMPORTER``).

``session/registry.py`` finds them by scanning this package; everything the formats share
(the model, the bounded readers, the salvage of bad records, threads and turns) is one level up
in ``replayer.core.session``. Adding a format is adding a module here.
"""
