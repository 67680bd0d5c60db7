"""An in-memory DynamoDB for simulating kinsumer's coordination on virtual time (issue 40).

:class:`SimDynamoDB` acts as a botocore DynamoDB client for the operations and parameters kinsumer
uses, keeping DynamoDB's rules: see :mod:`tests.sim.dynamodb` for the model and its approximations.
"""

from tests.sim.capacity import Limits
from tests.sim.dynamodb import SimDynamoDB

__all__ = ["Limits", "SimDynamoDB"]
