"""The engine versions Tandem's plug-ins are written against, and the refusal on any other.

Both engines change their plug-in interfaces from release to release (SGLang's HiCache storage
calls and host-pool layouts, vLLM's connector methods and constructor), so each plug-in checks
the installed engine when it is imported and refuses another version, naming both. This module
never imports an engine: it reads the installed distribution's metadata.
"""

from __future__ import annotations

from importlib import metadata
from typing import Optional

__all__ = ["SUPPORTED", "UnsupportedEngineVersion", "installed_version", "require"]

SUPPORTED = {"sglang": "0.5.23", "vllm": "0.33.0"}
"""Distribution name → the one version its plug-in supports."""


class UnsupportedEngineVersion(ImportError):
    """The installed engine is not the version its Tandem plug-in is written for.

    ``engine``: the distribution name; ``installed``: its version, or ``None`` when it is not
    installed; ``supported``: the version the plug-in supports."""

    def __init__(self, engine: str, installed: Optional[str], supported: str) -> None:
        found = "is not installed" if installed is None else f"is version {installed}"
        super().__init__(
            f"tandem's {engine} plug-in supports {engine} {supported} only; the installed "
            f"{engine} {found}. Install {engine}=={supported}, or a tandem-kv release written "
            f"for {engine} {installed}."
        )
        self.engine = engine
        self.installed = installed
        self.supported = supported


def installed_version(engine: str) -> Optional[str]:
    """The installed version of distribution ``engine``, or ``None``."""
    try:
        return metadata.version(engine)
    except metadata.PackageNotFoundError:
        return None


def require(engine: str, installed: Optional[str] = None) -> str:
    """Check that ``engine`` (a key of :data:`SUPPORTED`) is installed at its supported
    version; returns it. ``installed`` overrides the lookup (tests).

    Raises :class:`UnsupportedEngineVersion` naming both versions; ``KeyError`` for an engine
    without a plug-in."""
    supported = SUPPORTED[engine]
    found = installed if installed is not None else installed_version(engine)
    if found is None or found.split("+")[0] != supported:
        raise UnsupportedEngineVersion(engine, found, supported)
    return found
