"""The official client's HTTPLookupService (pulsar-client 3.x) against our admin server (WC-1, WC-4).

With an http:// service URL the C++ client asks partitions over REST
(GET .../partitions?checkAllowAutoCreation=true); no Pulsar-protocol broker is needed for that.
"""

from __future__ import annotations

import pytest
from admin_harness import Admin

pulsar = pytest.importorskip("pulsar")


def test_get_topic_partitions_over_http_lookup(admin: Admin) -> None:
    assert admin.request("PUT", "/admin/v2/persistent/public/default/http-pt/partitions", '"3"').status == 204
    client = pulsar.Client(f"http://127.0.0.1:{admin.port}", operation_timeout_seconds=10)
    try:
        assert client.get_topic_partitions("http-pt") == [
            f"persistent://public/default/http-pt-partition-{i}" for i in range(3)
        ]
        assert client.get_topic_partitions("persistent://public/default/plain") == [
            "persistent://public/default/plain"
        ]
        with pytest.raises(pulsar.PulsarException):
            client.get_topic_partitions("persistent://ghost/ns/t")  # 404 -> an error, not a hang
    finally:
        client.close()
