"""The client's error tree and its mapping from server codes (the public names themselves are pinned
in tests/unit/test_public_api.py)."""

from __future__ import annotations

import velamq.client as client
from velamq._errors import ClientError, ServerError
from velamq.protocol import pb


def test_errors_form_one_tree_mapped_from_server_codes() -> None:
    assert issubclass(client.ProducerQueueIsFullError, ClientError)
    assert issubclass(client.MemoryBufferIsFullError, ClientError)
    assert not issubclass(client.ProducerQueueIsFullError, client.MemoryBufferIsFullError)
    assert issubclass(client.SendTimeoutError, TimeoutError)
    err = client.error_from_server(pb.TopicNotFound, "no such topic")
    assert isinstance(err, client.TopicNotFoundError) and isinstance(err, ServerError) and err.code == pb.TopicNotFound
    assert isinstance(client.error_from_server(pb.ProducerFenced, "x"), client.ProducerFencedError)
    assert isinstance(client.error_from_server(pb.ServiceNotReady, "x"), client.ServiceNotReadyError)
    assert type(client.error_from_server(pb.MetadataError, "x")) is client.BrokerError
    assert client.error_from_server(pb.MetadataError, "x").retriable
    assert not client.error_from_server(pb.TopicNotFound, "x").retriable
