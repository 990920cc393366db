"""The package's version, in a module of its own at the bottom of the layer order, so that checkpoints
and exports can record it without importing the package root (which sits at the top); and the installed
versions of the libraries whose internals attnkit reaches into, for the shims that check them at import
(:mod:`attnkit.hf.transformers_internals`, :mod:`attnkit.explorer.pebble_internals`)."""

__version__ = "0.1.0"


def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution`` (``"transformers"``, ``"Pebble"``), read from its metadata
    with :mod:`importlib.metadata` (nothing imported), or None when it is not installed."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string, its leading dotted integers: ``"5.23.0"`` -> ``(5, 23, 0)``,
    ``"6.0.0rc1"`` -> ``(6, 0, 0)``, ``"0.54.0.dev3"`` -> ``(0, 54, 0)``."""
    parts = []
    for piece in version.split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(piece):
            break
    return tuple(parts)


def outside_range(library: str, installed: str | None, minimum: str, below: str) -> str | None:
    """One line naming ``library``, its ``installed`` version and the supported range
    ``>=minimum,<below`` when the installed version lies outside it; None inside it (or when not installed).
    Releases compare as integer tuples, so ``5.10`` is above ``5.9``; a pre-release of ``below`` counts as
    ``below`` (outside)."""
    if installed is None:
        return None
    got = release(installed)
    if release(minimum) <= got < release(below):
        return None
    return (
        f"{library} {installed} is outside the range attnkit's use of its internals was written for "
        f"(>={minimum},<{below})"
    )
