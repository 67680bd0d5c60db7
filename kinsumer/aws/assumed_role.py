"""Reading a stream as an IAM role: a boto3 session whose credentials are the role's, refreshed in time.

The role is assumed with STS from the caller's credentials (the source session), lazily on the
first call and again before the credentials expire (botocore refreshes them 15 minutes before,
as its own ``role_arn`` profiles do), so a consumer that runs for days never holds expired ones.
"""

from __future__ import annotations

from typing import Any

import boto3
import botocore.credentials
import botocore.session

from ..errors import ConfigError

__all__ = ["assumed_role_session"]

_DURATION = 3600  # seconds each set of the role's credentials lasts


def assumed_role_session(
    source: boto3.Session,
    role_arn: str,
    session_name: str,
    external_id: str | None = None,
    sts_endpoint_url: str | None = None,
) -> boto3.Session:
    """A session that acts as ``role_arn``, assumed from ``source``'s credentials through STS at
    ``sts_endpoint_url`` (None: the standard settings; ``AWS_ENDPOINT_URL`` reaches STS as well)."""
    source_core: botocore.session.Session = source._session
    source_credentials = source_core.get_credentials()
    if source_credentials is None:
        rule = "needs credentials of the caller to assume the role with: none were found"
        raise ConfigError("Config.role_arn", rule, role_arn)
    extra: dict[str, Any] = {"RoleSessionName": session_name, "DurationSeconds": _DURATION}
    if external_id is not None:
        extra["ExternalId"] = external_id

    def sts_client(service: str, **kwargs: Any) -> Any:
        if sts_endpoint_url is not None:
            kwargs["endpoint_url"] = sts_endpoint_url
        return source_core.create_client(service, **kwargs)

    fetcher = botocore.credentials.AssumeRoleCredentialFetcher(
        client_creator=sts_client,
        source_credentials=source_credentials,
        role_arn=role_arn,
        extra_args=extra,
    )
    credentials = botocore.credentials.DeferredRefreshableCredentials(
        refresh_using=fetcher.fetch_credentials, method="assume-role"
    )
    core = botocore.session.Session()
    core._credentials = credentials  # type: ignore[attr-defined]  # no public setter takes refreshable ones
    region = source.region_name
    if region is not None:
        core.set_config_variable("region", region)
    return boto3.Session(botocore_session=core)
