"""Stub for OpenNMT-py 3.5.1, which imports fasttext when it loads its transforms package.

The peer benchmark uses no transform that needs it; using one would fail on a missing attribute."""
