"""Consumer commands of one connection.

    SUBSCRIBE            load the topic, check its schema (_schemas.py), open or find the
                         subscription, check type and limits, attach a ServerConsumer
    FLOW                 grant permits; ACK (individual, cumulative, batch index); REDELIVER
    UNSUBSCRIBE          the only consumer deletes its subscription
    CLOSE_CONSUMER       detach (a reader's non-durable subscription goes with its last consumer)
    SEEK                 to a message id or a publish time (Subscription.seek_target, .seek)
    GET_LAST_MESSAGE_ID  the newest message the consumer can get, and its mark-delete position
    CONSUMER_STATS       the figures of one consumer

FLOW, ACK, REDELIVER and CONSUMER_STATS are handled inline (they only touch state on the loop);
the others run as tasks (they wait for storage or metadata).
"""

from __future__ import annotations

from velamq._topic_name import TopicName
from velamq.broker._channel import CLOSED_CHANNEL, Channel, ConsumerRef, success_reply
from velamq.broker._errors import BrokerRequestError
from velamq.broker.log._positions import mark_delete_for_message_id
from velamq.broker.session._context import TopicRegistry
from velamq.broker.session._topic_ports import CommandTopic, ConsumerSubscription
from velamq.broker.subscription._consumer import ServerConsumer
from velamq.broker.subscription._key_shared import HashRangeOverlapError
from velamq.broker.subscription._selector import SubType
from velamq.broker.topic._topic import Topic
from velamq.protocol import Frame, pb, signed64, unsigned64
from velamq.storage import Position

T = pb.BaseCommand


def _position(message_id: pb.MessageIdData) -> Position:
    return Position(signed64(message_id.ledgerId), signed64(message_id.entryId))


class AttachedConsumer(ServerConsumer):
    """A consumer as its connection knows it: with the subscription its commands go to (the
    subscription itself only ever sees the ServerConsumer)."""

    __slots__ = ("subscription",)

    def __init__(
        self,
        subscription: ConsumerSubscription,
        channel: Channel,
        consumer_id: int,
        name: str,
        priority: int,
        partition_index: int,
        connected_since_ms: int = 0,
    ) -> None:
        super().__init__(channel, consumer_id, name, priority, partition_index, connected_since_ms)
        self.subscription = subscription


class ConsumerCommands:
    """The consumers of one connection, by consumer id, and the handlers of their commands."""

    def __init__(self, channel: Channel, broker: TopicRegistry) -> None:
        self._channel = channel
        self._broker = broker
        self._consumers: dict[int, AttachedConsumer] = {}

    def _consumer(self, consumer_id: int) -> AttachedConsumer:
        consumer = self._consumers.get(consumer_id)
        if consumer is None:
            raise BrokerRequestError(pb.ConsumerNotFound, f"consumer {consumer_id} not found")
        return consumer

    # ---- SUBSCRIBE -------------------------------------------------------------------------------

    async def on_subscribe(self, frame: Frame) -> None:
        request = frame.command.subscribe
        if request.consumer_id in self._consumers:
            self._channel.send_command(success_reply(request.request_id))
            return
        topic, subscription = await self._open_subscription(request)
        sub_type = SubType(int(request.subType))
        schema = request.schema if request.HasField("schema") else None
        out_of_order = _allow_out_of_order(request, sub_type)
        if not subscription.consumers:
            subscription.sub_type = sub_type
            subscription.read_compacted = request.read_compacted
            subscription.allow_out_of_order = out_of_order
        elif sub_type == SubType.KEY_SHARED and subscription.allow_out_of_order != out_of_order:
            # As Pulsar (SubscriptionBusyException): the subscription keeps its first consumer's rule.
            allowed = "allows" if subscription.allow_out_of_order else "does not allow"
            reason = f"Subscription is of different type. Active subscription {allowed} out of order delivery"
            raise BrokerRequestError(pb.ConsumerBusy, reason)
        consumer = AttachedConsumer(
            subscription,
            self._channel,
            request.consumer_id,
            request.consumer_name or f"consumer-{request.consumer_id}",
            request.priority_level,
            topic.partition_index,
            connected_since_ms=self._broker.clock.now_ms(),
        )
        consumer.auto_consume = schema is not None and schema.type == pb.Schema.AutoConsume
        consumer.metadata = {kv.key: kv.value for kv in request.metadata}
        sticky = _sticky_ranges(request, sub_type)
        if self._channel.closed:
            return
        try:
            subscription.add_consumer(consumer, sticky)
        except HashRangeOverlapError as exc:
            raise BrokerRequestError(pb.ConsumerAssignError, str(exc)) from None
        subscription.resetting = False
        self._consumers[request.consumer_id] = consumer
        self._channel.send_command(success_reply(request.request_id))

    async def _open_subscription(self, request: pb.CommandSubscribe) -> tuple[CommandTopic, ConsumerSubscription]:
        """SUBSCRIBE's topic (loaded, or created if the request may) and subscription (created if
        needed), once the consumer's schema is accepted and the subscription may take it."""
        name = TopicName.parse(request.topic)
        if not request.subscription or "\n" in request.subscription:
            raise BrokerRequestError(pb.NotAllowedError, "invalid subscription name")
        if request.read_compacted and not name.persistent:  # as Pulsar: nothing to compact
            raise BrokerRequestError(pb.NotAllowedError, "readCompacted only valid on persistent topics")
        topic = await self._broker.open_topic(name, create=request.force_topic_creation)
        schema = request.schema if request.HasField("schema") else None
        await self._broker.schemas.for_consumer(topic, schema)
        sub_type = SubType(int(request.subType))
        start = None
        if not request.durable and request.HasField("start_message_id") and isinstance(topic, Topic):
            # A reader: delivery starts AT the start id; the client drops what it must for
            # exclusive starts. Without a start id: latest. (A non-persistent topic has no log to
            # start in: its readers get what is published from now on.)
            start_id = _position(request.start_message_id)
            start = mark_delete_for_message_id(topic.ledger, start_id.ledger_id, start_id.entry_id)
        subscription = await topic.subscription(
            request.subscription,
            sub_type,
            request.durable,
            request.initialPosition == pb.CommandSubscribe.Earliest,
            start,
        )
        if topic.closed:  # unloaded while this request waited (issue 10): the client retries
            raise BrokerRequestError(pb.ServiceNotReady, f"topic {topic.full_name} was unloaded, retry")
        _check_subscribe(topic, subscription, sub_type, request.subscription)
        if request.replicate_subscription_state and request.durable and isinstance(topic, Topic):
            topic.replicate_subscription(request.subscription)
        return topic, subscription

    # ---- flow, acks, redelivery ------------------------------------------------------------------

    def on_flow(self, frame: Frame) -> None:
        flow = frame.command.flow
        consumer = self._consumers.get(flow.consumer_id)
        if consumer is not None:
            consumer.last_flow_ms = self._broker.clock.now_ms()
            consumer.subscription.flow(consumer, flow.messagePermits)

    def on_ack(self, frame: Frame) -> None:
        ack = frame.command.ack
        consumer = self._consumers.get(ack.consumer_id)
        if consumer is not None and ack.message_id:
            consumer.last_acked_ms = self._broker.clock.now_ms()
            subscription = consumer.subscription
            if ack.ack_type == pb.CommandAck.Cumulative:
                mid = ack.message_id[0]
                subscription.acknowledge_cumulative(_position(mid), list(mid.ack_set) or None)
            else:
                subscription.acknowledge([(_position(m), list(m.ack_set) or None) for m in ack.message_id])
        if ack.HasField("request_id"):
            reply = pb.BaseCommand(type=T.ACK_RESPONSE)
            reply.ackResponse.consumer_id = ack.consumer_id
            reply.ackResponse.request_id = ack.request_id
            if consumer is None:  # an ack receipt must not confirm what nobody applied
                reply.ackResponse.error = pb.ConsumerNotFound
                reply.ackResponse.message = f"consumer {ack.consumer_id} not found"
            self._channel.send_command(reply)

    def on_redeliver(self, frame: Frame) -> None:
        request = frame.command.redeliverUnacknowledgedMessages
        consumer = self._consumers.get(request.consumer_id)
        if consumer is None:
            return
        subscription = consumer.subscription
        if request.message_ids and subscription.sub_type in (SubType.SHARED, SubType.KEY_SHARED):
            subscription.redeliver(consumer, [_position(m) for m in request.message_ids])
        else:
            subscription.redeliver(consumer, None)

    # ---- leaving ---------------------------------------------------------------------------------

    async def on_unsubscribe(self, frame: Frame) -> None:
        request = frame.command.unsubscribe
        consumer = self._consumer(request.consumer_id)
        subscription = consumer.subscription
        if any(c is not consumer for c in subscription.consumers):
            raise BrokerRequestError(pb.UnknownError, "Unconnected or shared consumer attempting to unsubscribe")
        self._consumers.pop(request.consumer_id, None)
        subscription.remove_consumer(consumer)
        topic = self._broker.find_topic(subscription.topic_name)
        if topic is not None:
            await topic.remove_subscription(subscription.name, delete_cursor=True)
        self._channel.send_command(success_reply(request.request_id))

    async def on_close_consumer(self, frame: Frame) -> None:
        request = frame.command.close_consumer
        consumer = self._consumers.pop(request.consumer_id, None)
        if consumer is not None:
            self._detach(consumer)
        self._channel.send_command(success_reply(request.request_id))

    def _detach(self, consumer: AttachedConsumer) -> None:
        subscription = consumer.subscription
        subscription.remove_consumer(consumer)
        if not subscription.durable and not subscription.consumers and not subscription.resetting:
            topic = self._broker.find_topic(subscription.topic_name)
            if topic is not None:
                self._broker.spawn(topic.remove_subscription(subscription.name, delete_cursor=False))

    def topic_of(self, consumer_id: int) -> tuple[str, str] | None:
        """(topic, subscription) of an open consumer, for the per-command authorization."""
        consumer = self._consumers.get(consumer_id)
        if consumer is None:
            return None
        return consumer.subscription.topic_name, consumer.subscription.name

    def forget(self, consumer: ConsumerRef) -> None:
        if self._consumers.get(consumer.consumer_id) is consumer:
            del self._consumers[consumer.consumer_id]

    def detach_all(self) -> None:
        """The connection is gone: its consumers leave their subscriptions, and this object lets go
        of the connection."""
        for consumer in list(self._consumers.values()):
            self._detach(consumer)
        self._consumers.clear()
        self._channel = CLOSED_CHANNEL

    def wake_all(self) -> None:
        """The connection is writable again: dispatch to its consumers may go on."""
        for consumer in self._consumers.values():
            consumer.subscription.wake()

    # ---- positions and figures -------------------------------------------------------------------

    async def on_seek(self, frame: Frame) -> None:
        request = frame.command.seek
        subscription = self._consumer(request.consumer_id).subscription
        message_id = None
        if request.HasField("message_id"):
            position = _position(request.message_id)
            message_id = (position.ledger_id, position.entry_id)
        publish_time = request.message_publish_time if request.HasField("message_publish_time") else None
        if message_id is None and publish_time is None:
            raise BrokerRequestError(pb.NotAllowedError, "seek needs a message id or a publish time")
        subscription.seek(await subscription.seek_target(message_id, publish_time))
        self._channel.send_command(success_reply(request.request_id))

    async def on_get_last_message_id(self, frame: Frame) -> None:
        request = frame.command.getLastMessageId
        consumer = self._consumer(request.consumer_id)
        subscription = consumer.subscription
        last, batch_index = await subscription.last_message_id()
        reply = pb.BaseCommand(type=T.GET_LAST_MESSAGE_ID_RESPONSE)
        r = reply.getLastMessageIdResponse
        r.request_id = request.request_id
        r.last_message_id.ledgerId = unsigned64(last.ledger_id)
        r.last_message_id.entryId = unsigned64(last.entry_id)
        if consumer.partition_index >= 0:
            r.last_message_id.partition = consumer.partition_index
        r.last_message_id.batch_index = batch_index
        md = subscription.mark_delete_position
        r.consumer_mark_delete_position.ledgerId = unsigned64(md.ledger_id)
        r.consumer_mark_delete_position.entryId = unsigned64(md.entry_id)
        self._channel.send_command(reply)

    def on_consumer_stats(self, frame: Frame) -> None:
        request = frame.command.consumerStats
        reply = pb.BaseCommand(type=T.CONSUMER_STATS_RESPONSE)
        r = reply.consumerStatsResponse
        r.request_id = request.request_id
        consumer = self._consumers.get(request.consumer_id)
        if consumer is None:
            r.error_code = pb.ConsumerNotFound
            r.error_message = f"consumer {request.consumer_id} not found"
        else:
            r.consumerName = consumer.name
            r.availablePermits = max(consumer.permits, 0)
            r.unackedMessages = consumer.unacked_messages
            r.msgBacklog = consumer.subscription.backlog
            r.address = self._channel.remote_address
            r.type = consumer.subscription.sub_type.pulsar_name
        self._channel.send_command(reply)


def _check_subscribe(topic: CommandTopic, subscription: ConsumerSubscription, sub_type: SubType, name: str) -> None:
    """Type and consumer-count rules: ConsumerBusy when the new consumer may not join."""
    if subscription.consumers and subscription.sub_type != sub_type:
        raise BrokerRequestError(pb.ConsumerBusy, f"subscription {name} is of type {subscription.sub_type.name}")
    if sub_type == SubType.EXCLUSIVE and subscription.consumers:
        raise BrokerRequestError(pb.ConsumerBusy, "Exclusive consumer is already connected")
    policies = topic.policies
    connected = sum(len(s.consumers) for s in topic.subscriptions.values())
    if policies.max_consumers > 0 and connected >= policies.max_consumers:
        raise BrokerRequestError(pb.ConsumerBusy, f"Topic reached max consumers limit {policies.max_consumers}")
    if 0 < policies.max_consumers_per_subscription <= len(subscription.consumers):
        raise BrokerRequestError(
            pb.ConsumerBusy, f"Subscription reached max consumers limit {policies.max_consumers_per_subscription}"
        )


def _allow_out_of_order(request: pb.CommandSubscribe, sub_type: SubType) -> bool:
    """KeySharedMeta.allowOutOfOrderDelivery of a Key_Shared consumer (False for any other)."""
    return sub_type == SubType.KEY_SHARED and request.HasField("keySharedMeta") and (
        request.keySharedMeta.allowOutOfOrderDelivery
    )


def _sticky_ranges(request: pb.CommandSubscribe, sub_type: SubType) -> list[tuple[int, int]] | None:
    """The hash ranges a STICKY Key_Shared consumer asks for (None for any other consumer)."""
    if sub_type != SubType.KEY_SHARED or not request.HasField("keySharedMeta"):
        return None
    meta = request.keySharedMeta
    if meta.keySharedMode != pb.STICKY:
        return None
    sticky = [(r.start, r.end) for r in meta.hashRanges]
    if not sticky:
        raise BrokerRequestError(pb.ConsumerAssignError, "sticky Key_Shared consumer without ranges")
    return sticky
