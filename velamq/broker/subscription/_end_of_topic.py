"""The end of a terminated topic, as its consumers hear of it (REACHED_END_OF_TOPIC).

Once a subscription of a terminated topic (velamq/broker/topic/_terminate.py) has consumed
everything, its consumers get REACHED_END_OF_TOPIC, as from Pulsar's
PersistentSubscription.topicTerminated and its dispatcher: a durable subscription when it has no
backlog left (checked at termination, when a consumer joins and after each acknowledgement); a
reader's, which never acknowledges, once every entry was sent to it (checked when its dispatch
finds the end of the log). A consumer may hear it more than once; clients treat it as a state.

It goes only to clients that handle it. Pulsar sends it to every client of protocol version 9 or
later, but the C++ library under the official Python, C++ and Node clients has no handler for it:
its ClientConnection closes the whole connection ("Received invalid message from server",
pulsar-client-cpp lib/ClientConnection.cc, handleIncomingCommand), with every producer and
consumer on it, and the consumer's reconnect, which finds the topic still at its end, closes it
again. velamq does not send it to a client whose CONNECT says it is that library (client_version
"Pulsar-CPP-v..."); such a consumer waits at the end of the topic, its connection left alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from velamq.broker.subscription._consumer import ServerConsumer
from velamq.protocol import pb
from velamq.storage import ManagedCursor, ManagedLedger, Position

# The first protocol version with REACHED_END_OF_TOPIC (Pulsar's ProtocolVersion.v9).
_END_OF_TOPIC_VERSION = 9
# CONNECT's client_version of the C++ library (see the module docstring).
_WITHOUT_END_OF_TOPIC = ("Pulsar-CPP-",)


class EndingSubscription(Protocol):
    """What the check reads of a subscription (SubscriptionState has it all)."""

    durable: bool
    cursor: ManagedCursor
    ledger: ManagedLedger
    read_position: Position

    @property
    def consumers(self) -> Sequence[ServerConsumer]: ...


def check_end_of_topic(subscription: EndingSubscription) -> None:
    """Tell the consumers of a terminated topic's subscription that the topic has ended, once the
    subscription has consumed it all."""
    if not subscription.consumers or not _consumed_all(subscription):
        return
    for consumer in subscription.consumers:
        send_end_of_topic(consumer)


def _consumed_all(subscription: EndingSubscription) -> bool:
    if subscription.durable:
        return subscription.cursor.backlog == 0  # Pulsar's check: nothing left to acknowledge
    last = subscription.ledger.last_confirmed
    return last is None or subscription.read_position > last


def send_end_of_topic(consumer: ServerConsumer) -> None:
    channel = consumer.channel
    if channel.protocol_version < _END_OF_TOPIC_VERSION or channel.client_version.startswith(_WITHOUT_END_OF_TOPIC):
        return
    command = pb.BaseCommand(type=pb.BaseCommand.REACHED_END_OF_TOPIC)
    command.reachedEndOfTopic.consumer_id = consumer.consumer_id
    channel.send_command(command)
