"""The package version (bundle.json records it)."""

__version__ = "0.1.0"
