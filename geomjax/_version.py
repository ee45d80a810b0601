"""The package version (one place; pyproject.toml states the same string, a test compares)."""

__version__ = "0.1.0"
