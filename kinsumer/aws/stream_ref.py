"""A stream as a user names it: by name (in the caller's account and region) or by ARN (any account, any region).

Pure (no I/O): the one place that turns what a user wrote into the parameters of a Kinesis call. A stream
named by ARN is called by ARN (``StreamARN``), as Kinesis requires of a stream another account shares through
a resource policy; a stream named by name is called by name (``StreamName``), as before. The tables and their
rows know a stream by its name either way (an ARN's slashes could not stand in a row key), so switching from a
name to its ARN keeps the checkpoints.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import attrs

from ..config import STREAM_NAME
from ..errors import ConfigError

__all__ = ["NAME_RULE", "StreamRef", "distinct_names", "reading_region", "stream_params"]

_ARN_PATTERN = re.compile(
    rf"arn:(?P<partition>aws(?:-[a-z]+)*):kinesis:(?P<region>[a-z]{{2}}(?:-[a-z]+)+-[0-9]+)"
    rf":(?P<account>[0-9]{{12}}):stream/(?P<name>{STREAM_NAME.pattern})"
)
#: What a stream reference must look like (the rule a :class:`~kinsumer.ConfigError` states).
NAME_RULE = (
    "must be a stream name (1-128 characters of A-Z a-z 0-9 _ . -) or a stream ARN "
    "(arn:aws:kinesis:<region>:<12-digit account id>:stream/<name>, as the Kinesis console shows it)"
)


def _check(instance: StreamRef, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str) or not (STREAM_NAME.fullmatch(value) or _ARN_PATTERN.fullmatch(value)):
        raise ConfigError(instance.field, NAME_RULE, value)


@attrs.frozen
class StreamRef:
    """A stream name or a stream ARN, checked (:class:`~kinsumer.ConfigError` naming ``field`` otherwise)."""

    #: As given: a name or an ARN.
    text: str = attrs.field(validator=_check)
    #: The argument or option that named it, for the error message.
    field: str = attrs.field(default="stream_name", eq=False, repr=False, kw_only=True)

    @property
    def arn(self) -> str | None:
        """The ARN, if the stream was named by one."""
        return self.text if self.text.startswith("arn:") else None

    @property
    def name(self) -> str:
        """The stream's name (taken from the ARN if named by one): how rows, records and logs know it."""
        return self._part("name") or self.text

    @property
    def region(self) -> str | None:
        """The ARN's region: where the stream is, so where its Kinesis client must be; None for a name."""
        return self._part("region")

    @property
    def account(self) -> str | None:
        """The ARN's account ID; None for a name (the caller's own account)."""
        return self._part("account")

    def params(self) -> dict[str, Any]:
        """The parameter a Kinesis call names the stream with: ``{"StreamARN": ...}`` or ``{"StreamName": ...}``
        (typed ``Any`` so that it spreads into a typed call beside the call's other parameters)."""
        return {"StreamARN": self.text} if self.arn else {"StreamName": self.text}

    def _part(self, group: str) -> str | None:
        match = _ARN_PATTERN.fullmatch(self.text)
        return match.group(group) if match else None


def stream_params(stream: str) -> dict[str, Any]:
    """The parameter a Kinesis call names ``stream`` (a name or an ARN) with (see :meth:`StreamRef.params`)."""
    return StreamRef(stream).params()


def reading_region(streams: Sequence[StreamRef], configured: str | None, *, field: str = "stream_name") -> str | None:
    """The region of the Kinesis client that reads ``streams``: the region of their ARNs, or None (those given by
    name only: the ``configured`` region). One client reads them all, so they must lie in one region: a
    :class:`~kinsumer.ConfigError` naming ``field`` says which do not."""
    regions = sorted({ref.region for ref in streams if ref.region})
    if len(regions) > 1:
        rule = (
            f"names streams in several regions ({', '.join(regions)}): one client reads one region; read each "
            "region's streams with a Kinsumer of its own"
        )
        raise ConfigError(field, rule, [ref.text for ref in streams])
    named = [ref.text for ref in streams if not ref.arn]
    if regions and named and configured is not None and configured != regions[0]:
        rule = (
            f"gives {', '.join(named)} by name, so in the configured region {configured}, and the other streams "
            f"by ARN in {regions[0]}: one client reads one region; give every stream by its ARN"
        )
        raise ConfigError(field, rule, [ref.text for ref in streams])
    return regions[0] if regions else None


def distinct_names(streams: Sequence[StreamRef], *, field: str = "stream_name") -> None:
    """Refuse (:class:`~kinsumer.ConfigError` naming ``field``) two streams of one name: their rows would be one."""
    for ref in streams:
        same = [other.text for other in streams if other.name == ref.name]
        if len(same) > 1:
            rule = (
                f"lists the stream {ref.name} more than once ({', '.join(same)}): the tables know a stream by its "
                "name, so two streams of one name (in two accounts or regions) would share their checkpoints; read "
                "them with applications of their own"
            )
            raise ConfigError(field, rule, [other.text for other in streams])
