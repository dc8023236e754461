"""`velamq standalone --config` with TLS and authentication, as a real process: the official client
over pulsar+ssl with a token, a plain connection without credentials refused, and a role without
grants refused per command while its connection stays open."""

from __future__ import annotations

import time
from pathlib import Path

import pulsar
from security_helpers import RawConnection, secure_setup

from velamq.protocol import pb
from velamq.testing import free_port, run_broker

T = pb.BaseCommand


def test_a_secured_standalone_process(tmp_path: Path) -> None:
    setup = secure_setup(tmp_path / "conf", brokerServicePortTls=str(free_port()))
    with run_broker(tmp_path / "data", config_file=setup.config_file) as broker:
        assert broker.service_url_tls is not None
        client = pulsar.Client(
            broker.service_url_tls,
            tls_trust_certs_file_path=str(setup.pki.ca_cert),
            tls_validate_hostname=True,
            authentication=pulsar.AuthenticationToken(setup.token("superUser")),
        )
        try:
            topic = f"persistent://public/default/process-{time.time_ns()}"
            consumer = client.subscribe(topic, "sub")
            client.create_producer(topic).send(b"over tls")
            assert consumer.receive(20_000).data() == b"over tls"
        finally:
            client.close()

        plain = RawConnection(broker.broker_port)
        try:
            reply = plain.connect()  # no credentials, no anonymous role
            assert reply.type == T.ERROR and reply.error.error == pb.AuthenticationError
            assert plain.closed_by_broker()
        finally:
            plain.close()

        stranger = RawConnection(broker.broker_port)
        try:
            assert stranger.connect("token", setup.token("stranger").encode()).type == T.CONNECTED
            for request_id in (1, 2):
                lookup = stranger.lookup("persistent://public/default/not-yours", request_id)
                assert lookup.error == pb.AuthorizationError
        finally:
            stranger.close()
    # Credentials never reach the log (the refusals above are logged with their reasons).
    for secret in (setup.token("superUser"), setup.token("stranger")):
        assert secret not in broker.output
