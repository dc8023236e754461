"""A request the broker refuses, with the Pulsar ServerError code the client acts on.

Which code matters: the official client retries "retryable" codes until its operation timeout
(30 s) and fails at once on fatal ones, so a refusal must use a fatal code when retrying cannot
help (TopicNotFound, ProducerBusy, ConsumerBusy, InvalidTopicName, NotAllowedError ...).
"""

from __future__ import annotations


class BrokerRequestError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
