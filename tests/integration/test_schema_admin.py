"""The schema admin API and `velamq admin schemas` on a real broker: Pulsar's paths, JSON and statuses."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from velamq.testing import BrokerProcess, run_broker

pytestmark = pytest.mark.timeout(180)

V0 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}
V1 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"},
                                                    {"name": "note", "type": "string", "default": ""}]}
BAD = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]}


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with run_broker() as b:
        yield b


def rest(broker: BrokerProcess, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(broker.admin_url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw.strip() else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def payload(definition: Any, kind: str = "AVRO") -> dict[str, Any]:
    return {"type": kind, "schema": json.dumps(definition), "properties": {"owner": "shop"}}


def test_rest_api(broker: BrokerProcess) -> None:
    base = f"/admin/v2/schemas/public/default/rest-{uuid.uuid4().hex[:6]}"
    assert rest(broker, "GET", base + "/schema")[0] == 404
    assert rest(broker, "GET", base + "/schemas") == (200, {"getSchemaResponses": []})
    assert rest(broker, "POST", base + "/schema", payload(V0)) == (200, {"version": {"version": 0}})
    assert rest(broker, "POST", base + "/schema", payload(V0)) == (200, {"version": {"version": 0}})
    assert rest(broker, "POST", base + "/compatibility", payload(V1)) == (
        202, {"compatibility": True, "schemaCompatibilityStrategy": "FULL"})
    status, answer = rest(broker, "POST", base + "/compatibility", payload(BAD))
    assert status == 409 and "Incompatible" in answer["reason"]
    assert rest(broker, "POST", base + "/schema", payload(BAD))[0] == 409
    assert rest(broker, "POST", base + "/schema", {"type": "AVRO", "schema": "{not json"})[0] == 422
    assert rest(broker, "POST", base + "/schema", {"type": "NOPE", "schema": ""})[0] == 422
    assert rest(broker, "POST", base + "/schema", payload(V1))[1] == {"version": {"version": 1}}
    assert rest(broker, "POST", base + "/version", payload(V0)) == (202, {"version": 0})
    assert rest(broker, "POST", base + "/version", payload(BAD)) == (202, {"version": -1})

    status, latest = rest(broker, "GET", base + "/schema")
    assert status == 200 and latest["version"] == 1 and latest["type"] == "AVRO"
    assert json.loads(latest["data"]) == V1 and latest["properties"] == {"owner": "shop"}
    assert latest["timestamp"] > 1_600_000_000_000
    assert rest(broker, "GET", base + "/schema/0")[1]["version"] == 0
    assert rest(broker, "GET", base + "/schema/7")[0] == 404
    assert rest(broker, "GET", base + "/schema/x")[0] == 400
    # A partition's name means its partitioned topic's schemas.
    assert rest(broker, "GET", base + "-partition-3/schema")[1]["version"] == 1
    assert [v["version"] for v in rest(broker, "GET", base + "/schemas")[1]["getSchemaResponses"]] == [0, 1]

    # Soft delete: a deletion version; the next schema starts a new history, checked against nothing.
    assert rest(broker, "DELETE", base + "/schema") == (200, {"version": 2})
    assert rest(broker, "GET", base + "/schema")[0] == 404
    assert rest(broker, "GET", base + "/schema/1")[0] == 404
    assert rest(broker, "POST", base + "/schema", payload(BAD))[1] == {"version": {"version": 3}}
    # Force: every version goes, and numbering starts again.
    assert rest(broker, "DELETE", base + "/schema?force=true") == (200, {"version": 3})
    assert rest(broker, "DELETE", base + "/schema") == (200, {"version": -1})
    assert rest(broker, "POST", base + "/schema", payload(V0))[1] == {"version": {"version": 0}}
    assert rest(broker, "GET", "/admin/v2/schemas/public/nowhere/x/schema")[0] == 404


def test_key_value_schemas_travel_as_json(broker: BrokerProcess) -> None:
    base = f"/admin/v2/schemas/public/default/kv-{uuid.uuid4().hex[:6]}"
    body = {"type": "KEY_VALUE", "schema": json.dumps({"key": "", "value": V0}),
            "properties": {"key.schema.type": "STRING", "value.schema.type": "AVRO", "kv.encoding.type": "SEPARATED"}}
    assert rest(broker, "POST", base + "/schema", body)[1] == {"version": {"version": 0}}
    latest = rest(broker, "GET", base + "/schema")[1]
    assert latest["type"] == "KEY_VALUE" and json.loads(latest["data"]) == {"key": "", "value": V0}


def new_namespace(broker: BrokerProcess) -> str:
    """A namespace of the test's own: the module's tests share one broker and run in random order,
    so namespace settings one of them changes must not be what another reads."""
    name = f"public/s-{uuid.uuid4().hex[:8]}"
    assert rest(broker, "PUT", f"/admin/v2/namespaces/{name}")[0] == 204
    return name


def test_schema_settings(broker: BrokerProcess) -> None:
    name = new_namespace(broker)
    ns = f"/admin/v2/namespaces/{name}"
    assert rest(broker, "GET", ns + "/isAllowAutoUpdateSchema")[0] == 204
    assert rest(broker, "GET", ns + "/isAllowAutoUpdateSchema?applied=true") == (200, True)
    assert rest(broker, "POST", ns + "/schemaValidationEnforced", True)[0] == 204
    assert rest(broker, "GET", ns + "/schemaValidationEnforced") == (200, True)
    assert rest(broker, "POST", ns + "/schemaValidationEnforced", False)[0] == 204
    assert rest(broker, "PUT", ns + "/schemaAutoUpdateCompatibilityStrategy", "Backward")[0] == 204
    assert rest(broker, "PUT", ns + "/schemaAutoUpdateCompatibilityStrategy", "Sideways")[0] == 400
    topic = f"settings-{uuid.uuid4().hex[:6]}"
    path = f"/admin/v2/persistent/{name}/{topic}"
    assert rest(broker, "PUT", path, {})[0] == 204
    # The older namespace field applies while neither the topic nor schemaCompatibilityStrategy says more.
    assert rest(broker, "GET", path + "/schemaCompatibilityStrategy?applied=true") == (200, "BACKWARD")
    assert rest(broker, "PUT", path + "/schemaCompatibilityStrategy", "ALWAYS_COMPATIBLE")[0] == 204
    assert rest(broker, "GET", path + "/schemaCompatibilityStrategy") == (200, "ALWAYS_COMPATIBLE")
    base = f"/admin/v2/schemas/{name}/{topic}"
    assert rest(broker, "POST", base + "/schema", payload(V0))[0] == 200
    assert rest(broker, "POST", base + "/schema", payload({"type": "string"}))[0] == 200  # anything goes
    assert rest(broker, "DELETE", path + "/schemaCompatibilityStrategy")[0] == 204
    assert rest(broker, "GET", path + "/schemaCompatibilityStrategy")[0] == 204
    assert rest(broker, "PUT", ns + "/schemaAutoUpdateCompatibilityStrategy", "Full")[0] == 204


def cli(broker: BrokerProcess, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "velamq", "admin", "--admin-url", broker.admin_url, *argv],
                          capture_output=True, text=True, timeout=60)


def test_cli(broker: BrokerProcess, tmp_path: Path) -> None:
    topic = f"cli-{uuid.uuid4().hex[:6]}"
    (tmp_path / "records.py").write_text(
        "from velamq.client.schema import Integer, Record, String\n\n"
        "class User(Record):\n    name = String()\n    age = Integer(required=True)\n")
    dry = cli(broker, "--json", "schemas", "extract", topic, "-c", "records.User", "-j", str(tmp_path), "-t", "avro",
              "-n")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(json.loads(dry.stdout)["schema"])["name"] == "User"
    done = cli(broker, "schemas", "extract", topic, "-c", "records.User", "-j", str(tmp_path / "records.py"),
               "-t", "json")
    assert done.returncode == 0, done.stderr
    got = cli(broker, "--json", "schemas", "get", topic)
    assert got.returncode == 0 and json.loads(got.stdout)["type"] == "JSON"

    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    user = {"type": "record", "name": "User", "fields": [{"name": "name", "type": ["null", "string"]},
                                                           {"name": "age", "type": "int"}]}
    added = {**user, "fields": [*user["fields"], {"name": "email", "type": "string", "default": ""}]}
    good.write_text(json.dumps({"type": "JSON", "schema": json.dumps(added), "properties": {}}))
    changed = {**user, "fields": [user["fields"][0], {"name": "age", "type": "string"}]}
    bad.write_text(json.dumps({"type": "JSON", "schema": json.dumps(changed)}))
    assert cli(broker, "schemas", "compatibility", topic, "-f", str(good)).returncode == 0
    refused = cli(broker, "schemas", "compatibility", topic, "-f", str(bad))
    assert refused.returncode == 1 and "HTTP 409" in refused.stderr
    assert cli(broker, "schemas", "upload", topic, "-f", str(good)).returncode == 0
    versions = cli(broker, "--json", "schemas", "get", topic, "--all-version")
    assert len(json.loads(versions.stdout)["getSchemaResponses"]) == 2
    assert json.loads(cli(broker, "--json", "schemas", "get", topic, "--version", "0").stdout)["version"] == 0
    assert cli(broker, "schemas", "delete", topic).returncode == 0
    assert cli(broker, "schemas", "get", topic).returncode == 1
    assert cli(broker, "schemas", "delete", topic, "--force").returncode == 0
    bad_class = cli(broker, "schemas", "extract", topic, "-c", "records.Nope", "-j", str(tmp_path), "-t", "avro")
    assert bad_class.returncode == 2 and "Record class" in bad_class.stderr

    assert cli(broker, "topics", "create", topic).returncode == 0
    assert cli(broker, "topics", "set-schema-compatibility-strategy", topic, "-s", "FORWARD").returncode == 0
    shown = cli(broker, "topics", "get-schema-compatibility-strategy", topic)
    assert shown.returncode == 0 and "FORWARD" in shown.stdout
    name = new_namespace(broker)
    assert cli(broker, "namespaces", "set-is-allow-auto-update-schema", name, "--disable").returncode == 0
    shown = cli(broker, "namespaces", "get-is-allow-auto-update-schema", name)
    assert "false" in shown.stdout
    assert cli(broker, "namespaces", "set-is-allow-auto-update-schema", name, "--enable").returncode == 0
