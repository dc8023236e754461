"""`velamq admin`'s permission verbs (pulsar-admin's names) against a real broker process with
authentication and authorization on: a grant made with the CLI lets velamq's client produce and
consume as that role, a role without it is refused, and a revoke takes it away; topic and
subscription grants, the Prefix subscription auth mode, tenant admin roles; 401 / 403 / 404 / 412
and bad arguments each exit non-zero with the reason.

The CLI runs in this process (velamq.cli._main.main, as `velamq admin ...` runs it) with a token on
its command line; the broker is a separate process started from a Pulsar-style config. A grant is
loaded into the broker's authorization model before the admin call answers, so each check after a
CLI call sees its effect without waiting.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from security_helpers import SecureSetup, secure_setup

from velamq.cli._main import main
from velamq.client import AuthenticationToken, AuthorizationError, Client
from velamq.testing import BrokerProcess, free_port, run_broker

pytestmark = pytest.mark.timeout(180)
receive_timeout_ms = 20_000


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> SecureSetup:
    return secure_setup(tmp_path_factory.mktemp("cli-permissions"), brokerServicePortTls=str(free_port()))


@pytest.fixture(scope="module")
def broker(setup: SecureSetup, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with run_broker(tmp_path_factory.mktemp("cli-permissions-data") / "data", config_file=setup.config_file) as b:
        yield b


class Cli:
    """`velamq admin --admin-url URL [--token T] ...` run in this process; returns (exit code, stdout, stderr)."""

    def __init__(self, broker: BrokerProcess, setup: SecureSetup, capsys: pytest.CaptureFixture[str]) -> None:
        self.broker, self.setup, self.capsys = broker, setup, capsys

    def run(self, *argv: str, role: str | None = "superUser") -> tuple[int, str, str]:
        auth = ["--token", self.setup.token(role)] if role is not None else []
        self.capsys.readouterr()  # what earlier calls printed
        code = main(["admin", "--admin-url", self.broker.admin_url, *auth, *argv])
        out, err = self.capsys.readouterr()
        return code, out, err

    def ok(self, *argv: str, role: str = "superUser") -> str:
        code, out, err = self.run(*argv, role=role)
        assert code == 0, err
        return out

    def json(self, *argv: str, role: str = "superUser") -> Any:
        return json.loads(self.ok(*argv, "--json", role=role))

    def fails(self, *argv: str, role: str | None = "superUser", code: int = 1) -> str:
        got, out, err = self.run(*argv, role=role)
        assert got == code, (out, err)
        return err


@pytest.fixture
def cli(broker: BrokerProcess, setup: SecureSetup, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(broker, setup, capsys)


def new_namespace(cli: Cli, tenant: str = "public") -> str:
    ns = f"{tenant}/perm-{uuid.uuid4().hex[:8]}"
    cli.ok("namespaces", "create", ns)
    return ns


def client_as(broker: BrokerProcess, setup: SecureSetup, role: str) -> Client:
    return Client(broker.service_url, authentication=AuthenticationToken(setup.token(role)), operation_timeout_s=30.0)


def round_trip(broker: BrokerProcess, setup: SecureSetup, role: str, topic: str, subscription: str = "sub") -> bytes:
    """Subscribe, produce one message and receive it, as `role` (AuthorizationError if refused)."""
    payload = f"{role}-{time.time_ns()}".encode()
    with client_as(broker, setup, role) as client:
        consumer = client.subscribe(topic, subscription, initial_position="earliest")
        client.create_producer(topic).send(payload)
        message = consumer.receive(timeout_ms=receive_timeout_ms)
        consumer.acknowledge(message)
        return message.data()


def refused(broker: BrokerProcess, setup: SecureSetup, role: str, topic: str, subscription: str = "sub") -> bool:
    """True if `role` may neither produce to nor subscribe to `topic`."""
    with client_as(broker, setup, role) as client:
        with pytest.raises(AuthorizationError):
            client.create_producer(topic)
        with pytest.raises(AuthorizationError):
            client.subscribe(topic, subscription)
    return True


def test_a_namespace_grant_lets_the_role_in_and_a_revoke_takes_it_away(
    cli: Cli, broker: BrokerProcess, setup: SecureSetup
) -> None:
    ns = new_namespace(cli)
    topic = f"persistent://{ns}/orders"
    assert cli.json("namespaces", "permissions", ns) == {}
    assert refused(broker, setup, "app", topic)

    assert cli.ok("namespaces", "grant-permission", ns, "--role", "app", "--actions", "produce,consume") == ""
    assert cli.json("namespaces", "permissions", ns) == {"app": ["consume", "produce"]}
    assert cli.ok("namespaces", "permissions", ns).split() == ["KEY", "VALUE", "app", "consume,", "produce"]
    payload = round_trip(broker, setup, "app", topic)
    assert payload.startswith(b"app-")
    assert refused(broker, setup, "other", topic)  # the grant is the app role's only

    # A grant replaces the role's actions, as in Pulsar: consume only now.
    cli.ok("namespaces", "grant-permission", ns, "--role", "app", "--actions", "consume")
    with client_as(broker, setup, "app") as client:
        client.subscribe(topic, "sub").close()
        with pytest.raises(AuthorizationError):
            client.create_producer(topic)

    assert cli.ok("namespaces", "revoke-permission", ns, "--role", "app") == ""
    assert cli.json("namespaces", "permissions", ns) == {}
    assert refused(broker, setup, "app", topic)


def test_a_topic_grant_covers_that_topic_only(cli: Cli, broker: BrokerProcess, setup: SecureSetup) -> None:
    ns = new_namespace(cli)
    granted, sibling = f"persistent://{ns}/granted", f"persistent://{ns}/sibling"
    cli.ok("namespaces", "grant-permission", ns, "--role", "app", "--actions", "consume")
    # --actions repeated, as pulsar-admin's list flag also takes it.
    cli.ok("topics", "grant-permission", granted, "--role", "other", "--actions", "produce", "--actions", "consume")
    assert cli.json("topics", "permissions", granted) == {"app": ["consume"], "other": ["consume", "produce"]}
    assert cli.json("topics", "permissions", sibling) == {"app": ["consume"]}

    assert round_trip(broker, setup, "other", granted).startswith(b"other-")
    assert refused(broker, setup, "other", sibling)

    cli.ok("topics", "revoke-permission", granted, "--role", "other")
    assert cli.json("topics", "permissions", granted) == {"app": ["consume"]}
    assert refused(broker, setup, "other", granted)
    # The namespace's grant is not the topic's to revoke: Pulsar's 412.
    err = cli.fails("topics", "revoke-permission", granted, "--role", "app")
    assert "Permissions are not set at the topic level (HTTP 412)" in err


def test_subscription_grants_and_the_prefix_auth_mode(cli: Cli, broker: BrokerProcess, setup: SecureSetup) -> None:
    ns = new_namespace(cli)
    topic = f"persistent://{ns}/shared"
    for role in ("app", "other"):
        cli.ok("namespaces", "grant-permission", ns, "--role", role, "--actions", "produce,consume")
    assert cli.json("namespaces", "subscription-permission", ns) == {}

    cli.ok("namespaces", "grant-subscription-permission", ns, "--subscription", "billing", "--roles", "app")
    assert cli.json("namespaces", "subscription-permission", ns) == {"billing": ["app"]}
    assert round_trip(broker, setup, "app", topic, "billing").startswith(b"app-")
    with client_as(broker, setup, "other") as client:
        with pytest.raises(AuthorizationError):
            client.subscribe(topic, "billing")
        client.subscribe(topic, "reports").close()  # other subscriptions stay open to it

    cli.ok("namespaces", "grant-subscription-permission", ns, "--subscription", "billing", "--roles", "app,other")
    assert round_trip(broker, setup, "other", topic, "billing").startswith(b"other-")
    cli.ok("namespaces", "revoke-subscription-permission", ns, "--subscription", "billing", "--role", "other")
    assert cli.json("namespaces", "subscription-permission", ns) == {"billing": ["app"]}
    with client_as(broker, setup, "other") as client, pytest.raises(AuthorizationError):
        client.subscribe(topic, "billing")
    err = cli.fails("namespaces", "revoke-subscription-permission", ns, "--subscription", "nope", "--role", "app")
    assert "(HTTP 412)" in err

    assert cli.ok("namespaces", "get-subscription-auth-mode", ns) == "None\n"
    cli.ok("namespaces", "set-subscription-auth-mode", ns, "-m", "Prefix")
    assert cli.ok("namespaces", "get-subscription-auth-mode", ns) == "Prefix\n"
    with client_as(broker, setup, "other") as client:
        client.subscribe(topic, "other-mine").close()
        with pytest.raises(AuthorizationError):
            client.subscribe(topic, "reports")


def test_tenant_admin_roles_may_grant_in_their_tenant(cli: Cli, broker: BrokerProcess, setup: SecureSetup) -> None:
    tenant = f"acme-{uuid.uuid4().hex[:8]}"
    cli.ok("tenants", "create", tenant, "--admin-roles", "app")
    assert cli.json("tenants", "get", tenant)["adminRoles"] == ["app"]
    ns = new_namespace(cli, tenant)
    # app administers the tenant: it may grant there, and not in public.
    cli.ok("namespaces", "grant-permission", ns, "--role", "other", "--actions", "consume", role="app")
    assert cli.json("namespaces", "permissions", ns, role="app") == {"other": ["consume"]}
    err = cli.fails("namespaces", "grant-permission", "public/default", "--role", "other", "--actions", "consume",
                    role="app")
    assert "(HTTP 403)" in err and "hint:" in err
    # update keeps the clusters and changes the roles: app loses the tenant.
    cli.ok("tenants", "update", tenant, "--admin-roles", "other")
    assert cli.json("tenants", "get", tenant)["adminRoles"] == ["other"]
    assert "(HTTP 403)" in cli.fails("namespaces", "permissions", ns, role="app")


def test_refusals_and_bad_arguments_exit_non_zero_with_the_reason(cli: Cli) -> None:
    ns = new_namespace(cli)
    err = cli.fails("namespaces", "grant-permission", ns, "--role", "app", "--actions", "produce", role=None)
    assert "Authentication required (HTTP 401)" in err and "--token" in err
    err = cli.fails("namespaces", "grant-permission", ns, "--role", "app", "--actions", "produce", role="app")
    assert "(HTTP 403)" in err
    err = cli.fails("namespaces", "permissions", "public/no-such-namespace")
    assert "(HTTP 404)" in err
    err = cli.fails("namespaces", "grant-permission", ns, "--role", "app", "--actions", "produce,publish", code=2)
    assert "unknown action 'publish'" in err and "produce, consume" in err
    err = cli.fails("topics", "grant-permission", f"persistent://{ns}/t", "--role", "app", "--actions", ",", code=2)
    assert "give at least one action" in err
    assert cli.json("namespaces", "permissions", ns) == {}  # nothing was granted by the refused calls


def test_the_permission_verbs_are_listed_with_pulsar_admins_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["admin", "namespaces", "grant-subscription-permission", "--help"])
    assert exited.value.code == 0
    usage = capsys.readouterr().out
    assert "--subscription SUBSCRIPTION" in usage and "--roles ROLES" in usage
    with pytest.raises(SystemExit) as exited:
        main(["admin", "topics", "grant-permission", "t"])  # --role and --actions are required
    assert exited.value.code == 2
    assert "--role" in capsys.readouterr().err
