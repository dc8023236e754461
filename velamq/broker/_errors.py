"""A request the broker refuses, with the Pulsar ServerError code the client acts on.

Which code matters: the official client retries "retryable" codes until its operation timeout
(30 s) and fails at once on fatal ones, so a refusal must use a fatal code when retrying cannot
help (TopicNotFound, ProducerBusy, ConsumerBusy, InvalidTopicName, NotAllowedError ...).
"""

from __future__ import annotations

from velamq._errors import ServerError


class BrokerRequestError(ServerError):
    """Raised by a command handler; the connection answers the request with `code` and `message`."""
