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


def test_the_client_works_without_pyarrow() -> None:
    # pyarrow is an optional extra (velamq[arrow]): importing and using the client must not need it,
    # and the Arrow forms say what to install.
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['pyarrow'] = None\n"
        "import velamq.client, velamq.protocol\n"
        "from velamq.client import Messages\n"
        "try:\n"
        "    Messages([]).to_arrow()\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install 'velamq[arrow]'" in out
