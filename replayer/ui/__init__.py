"""The Textual app. It only renders what ``replayer.core`` produces."""
