"""Which binary-protocol command needs which permission (authorizationEnabled), checked before the
command runs. Pulsar's ServerCnx table:

    command                                        checked                      on
    LOOKUP, PARTITIONED_METADATA, GET_SCHEMA,      TopicOperation.LOOKUP        the topic
    GET_OR_CREATE_SCHEMA                           (produce or consume)
    PRODUCER                                       TopicOperation.PRODUCE       the topic
    SUBSCRIBE                                      TopicOperation.CONSUME       the topic, with the
                                                   (+ subscription rules)       subscription's name
    SEEK, GET_LAST_MESSAGE_ID, UNSUBSCRIBE         TopicOperation.CONSUME       the consumer's topic
                                                                                and subscription
    GET_TOPICS_OF_NAMESPACE                        NamespaceOperation.GET_TOPICS  the namespace

The model is read at each command, so a grant or a revoke applies to the next command of every
live connection. Producers and consumers already open stay open, as in Pulsar. A refusal is a
per-request AuthorizationError; the connection stays open. A topic name that does not parse is
left to the handler, which refuses it with InvalidTopicName.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from velamq._errors import InvalidTopicNameError
from velamq.protocol import pb
from velamq.security import AuthorizationModel, NamespaceOperation, TopicOperation

T = pb.BaseCommand

# command type -> (field of BaseCommand, operation)
_TOPIC_COMMANDS: Final[dict[int, tuple[str, TopicOperation]]] = {
    T.LOOKUP: ("lookupTopic", TopicOperation.LOOKUP),
    T.PARTITIONED_METADATA: ("partitionMetadata", TopicOperation.LOOKUP),
    T.GET_SCHEMA: ("getSchema", TopicOperation.LOOKUP),
    T.GET_OR_CREATE_SCHEMA: ("getOrCreateSchema", TopicOperation.LOOKUP),
    T.PRODUCER: ("producer", TopicOperation.PRODUCE),
    T.SUBSCRIBE: ("subscribe", TopicOperation.CONSUME),
}
# Commands on an open consumer: checked against the consumer's topic and subscription.
_CONSUMER_COMMANDS: Final[dict[int, str]] = {
    T.SEEK: "seek",
    T.GET_LAST_MESSAGE_ID: "getLastMessageId",
    T.UNSUBSCRIBE: "unsubscribe",
}

# Every command denial() looks at; the rest (SEND, ACK, FLOW, ...) act on producers and consumers
# that were authorized when they were opened.
CHECKED_COMMANDS: Final = frozenset({*_TOPIC_COMMANDS, *_CONSUMER_COMMANDS, T.GET_TOPICS_OF_NAMESPACE})

# consumer_id -> (topic, subscription) of a consumer open on the connection, or None
ConsumerLookup = Callable[[int], "tuple[str, str] | None"]


def denial(
    model: AuthorizationModel, role: str | None, command: pb.BaseCommand, consumer_of: ConsumerLookup
) -> str | None:
    """The AuthorizationError message if `role` may not run `command`, else None."""
    entry = _TOPIC_COMMANDS.get(command.type)
    if entry is not None:
        field, operation = entry
        body = getattr(command, field)
        subscription = body.subscription if command.type == T.SUBSCRIBE else None
        return _topic_denial(model, role, operation, body.topic, subscription)
    field_name = _CONSUMER_COMMANDS.get(command.type)
    if field_name is not None:
        found = consumer_of(getattr(command, field_name).consumer_id)
        if found is None:
            return None  # no such consumer: the handler answers that
        return _topic_denial(model, role, TopicOperation.CONSUME, found[0], found[1])
    if command.type == T.GET_TOPICS_OF_NAMESPACE:
        namespace = command.getTopicsOfNamespace.namespace
        if not model.allow_namespace_operation(role, NamespaceOperation.GET_TOPICS, namespace):
            return f"Client is not authorized to {NamespaceOperation.GET_TOPICS.value} {namespace} (role {role})"
    return None


def _topic_denial(
    model: AuthorizationModel, role: str | None, operation: TopicOperation, topic: str, subscription: str | None
) -> str | None:
    try:
        allowed = model.allow_topic_operation(role, operation, topic, subscription)
    except InvalidTopicNameError:
        return None
    if allowed:
        return None
    what = f"{topic} with subscription {subscription}" if subscription else topic
    return f"Client is not authorized to {operation.value} {what} (role {role})"
