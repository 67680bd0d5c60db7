"""kinsumer's version: at the base, so that any layer may name it (the package, setup.cfg and the spans read it)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
