"""What the ordered consumer does when a handler fails: retry in place with backoff, or, after
max_attempts, publish to the dead-letter topic and count the message as done.

Every handler mode uses the same Failures object of its partition: coroutine handlers await
settle() directly, thread handlers wait for it from their thread, process handlers retry in their
process and hand a message they gave up on to dead_letter() (see _processes.py).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from velamq.client._errors import InvalidConfigurationError
from velamq.client._message import Message
from velamq.client.consumer._dead_letter import DeadLetterSender

log = logging.getLogger("velamq.client")

RETRY, DONE, STOP = "retry", "done", "stop"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """What happens when the handler raises (see the module docstring)."""

    max_attempts: int | None = None  # None: retry for ever
    initial_backoff_ms: int = 100
    max_backoff_ms: int = 10_000
    dead_letter_topic: str | None = None

    def __post_init__(self) -> None:
        if self.max_attempts is not None and self.max_attempts < 1:
            raise InvalidConfigurationError("max_attempts must be >= 1 (or None: retry for ever)")
        if self.max_attempts is not None and not self.dead_letter_topic:
            raise InvalidConfigurationError(
                "max_attempts needs a dead_letter_topic: a message that gives up must go somewhere, "
                "or it would be lost")
        if self.initial_backoff_ms < 0 or self.max_backoff_ms < self.initial_backoff_ms:
            raise InvalidConfigurationError("need 0 <= retry_initial_backoff_ms <= retry_max_backoff_ms")

    def backoff_s(self, failed_attempts: int) -> float:
        """The wait after the n-th failed call: initial, doubling, capped."""
        ms: int = self.initial_backoff_ms * (1 << min(max(0, failed_attempts - 1), 30))
        return min(ms, self.max_backoff_ms) / 1000

    def gives_up(self, failed_attempts: int) -> bool:
        return self.max_attempts is not None and failed_attempts >= self.max_attempts


class Failures:
    """One partition's failure handling and counters (runs on the client's loop)."""

    def __init__(self, topic: str, policy: RetryPolicy, dead_letters: DeadLetterSender | None,
                 stopped: asyncio.Event) -> None:
        self.topic = topic
        self.policy = policy
        self._dead_letters = dead_letters
        self.stopped = stopped
        self.handler_failures = 0
        self.retries = 0
        self.dead_lettered = 0

    async def settle(self, message: Message, attempts: int, error: BaseException) -> str:
        """After the attempts-th failed call: RETRY (after the backoff), DONE (dead-lettered) or
        STOP (the consumer stops first; the message stays unacknowledged)."""
        self.handler_failures += 1
        if self.policy.gives_up(attempts):
            log.warning("%s: handler failed %d times on %s (%r); dead-lettering it", self.topic, attempts,
                        message.message_id, error)
            return DONE if await self.dead_letter(message) else STOP
        delay_s = self.policy.backoff_s(attempts)
        log.warning("%s: handler failed on %s (attempt %d: %r); retrying in %.3f s", self.topic,
                    message.message_id, attempts, error, delay_s)
        if not await self.backoff(delay_s):
            return STOP
        self.retries += 1
        return RETRY

    async def backoff(self, delay_s: float) -> bool:
        """Wait, unless the consumer stops first (False)."""
        if self.stopped.is_set():
            return False
        try:
            await asyncio.wait_for(self.stopped.wait(), delay_s)
        except TimeoutError:
            return True
        return False

    async def dead_letter(self, message: Message) -> bool:
        """Publish to the dead-letter topic, retrying until it is stored (True) or the consumer
        stops (False)."""
        assert self._dead_letters is not None  # RetryPolicy insists on a topic with max_attempts
        failures = 0
        while True:
            try:
                await self._dead_letters.send(message)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                delay_s = self.policy.backoff_s(failures)
                log.warning("%s: cannot dead-letter %s (%s); retrying in %.3f s", self.topic, message.message_id,
                            exc, delay_s)
                if not await self.backoff(delay_s):
                    return False
                continue
            self.dead_lettered += 1
            return True
