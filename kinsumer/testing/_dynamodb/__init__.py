"""An in-memory DynamoDB with DynamoDB's rules, for the operations and parameters kinsumer uses (see
:mod:`.client`). Private: :class:`kinsumer.testing.LocalDynamoDB` is its public face; kinsumer's own
simulator (``tests/sim``) drives it on virtual time."""

from .capacity import Limits
from .client import SimDynamoDB

__all__ = ["Limits", "SimDynamoDB"]
