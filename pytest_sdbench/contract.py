"""The contract facts, for downstream code that imports ``pytest_sdbench.contract``; their
one home is the wire format (wire.contract)."""

from .wire.contract import *  # noqa: F403
