"""flowcast: secure, reliable, distributed applications as routed data flows."""

from flowcast.errors import ClosedError, Error

__version__ = "0.1.0"

__all__ = ["ClosedError", "Error", "__version__"]
