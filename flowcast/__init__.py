"""flowcast: secure, reliable, distributed applications as routed data flows."""

__version__ = "0.1.0"
