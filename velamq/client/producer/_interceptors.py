"""Producer interceptors (PR-4): step 4 of the send path.

before_send runs on every message before admission and may return a changed message (a new
ProducerMessage, e.g. with an extra property); on_acknowledgement runs once per message when its
receipt arrives (message_id set) or it fails (error set). An exception in on_acknowledgement is
logged, never raised into the send path.
"""

from __future__ import annotations

from typing import Any

from velamq.client._message import MessageId, ProducerMessage


class ProducerInterceptor:
    """Subclass and override either method; the defaults change nothing."""

    def before_send(self, producer: Any, message: ProducerMessage) -> ProducerMessage:
        return message

    def on_acknowledgement(self, producer: Any, message: ProducerMessage, message_id: MessageId | None,
                           error: BaseException | None) -> None:
        return None
