"""The package's version, in a module of its own at the bottom of the layer order, so that checkpoints
and exports can record it without importing the package root (which sits at the top)."""

__version__ = "0.1.0"
