"""AdminClient: a small blocking client of Pulsar's admin REST API (v2 paths), for velamq or Pulsar.

    admin = AdminClient("http://localhost:8080")
    admin.request("GET", "/admin/v2/tenants")                       -> parsed JSON, None for 204
    admin.request("PUT", AdminClient.topic_path("t", "partitions"), 4)
    admin.request_raw("GET", path)                                  -> AdminReply(status, headers, body)
    AdminClient.path("tenants", "my tenant") == "/admin/v2/tenants/my%20tenant"

A status >= 400 raises AdminError with the status and the `reason` of Pulsar's error body; a server
that cannot be reached raises AdminError with status 0. A 307 or 308 redirect (a broker of several
workers sends a topic's call to the worker that owns it) is followed with the same method and body.
Only the standard library is used (urllib), and nothing is kept between calls, so an AdminClient is
picklable and safe to share between threads: velamq's CLI (`velamq admin`) and the Spark connector
both use this one class.

What every request carries is built in one place, `_request()`: the headers given to the
constructor, the authentication plugin's header (Authorization: Bearer / Basic, a token supplier
asked again for each request), and for https URLs the TLS context built from the security
settings (trust file, allow insecure, host name check, client certificate):

    AdminClient("https://host:8443", security=ConnectionSecurity(auth_plugin="token",
                auth_params="file:///run/admin.token", tls_trust_certs_file_path="ca.pem"))
    AdminClient("https://host:8443", authentication=AuthenticationToken(my_supplier),
                security=ConnectionSecurity(tls_trust_certs_file_path="ca.pem"))

401 (no or refused credentials) and 403 (no permission) are AdminErrors with that status.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from email.message import Message
from http.client import HTTPMessage, HTTPResponse
from typing import Any, Final

from velamq._topic_name import TopicName
from velamq.client._errors import AdminError
from velamq.client.security._auth import Authentication
from velamq.client.security._settings import ConnectionSecurity, check_authentication, ssl_context_for

admin_timeout_s_default: Final = 30.0
error_reason_chars_max: Final = 500


class _NoBody:
    """The marker for "send no body" (None is a valid JSON body: null)."""

    def __repr__(self) -> str:
        return "NO_BODY"


NO_BODY: Final = _NoBody()


@dataclass(frozen=True, slots=True)
class AdminReply:
    """A response taken as it is (not parsed as JSON), e.g. a peeked message: status, headers, body."""

    status: int
    headers: Message
    body: bytes


class AdminClient:
    """A blocking client of the admin REST API at `admin_url` (e.g. http://localhost:8080).

    Each call opens its own HTTP request with urllib and keeps nothing afterwards, so one instance
    may be shared by threads and pickled to Spark executors. `headers` are added to every request
    and `ssl_context` is used for https URLs; the paths are Pulsar's admin v2 paths, so the same
    calls work against an Apache Pulsar cluster. Errors are AdminError (status 0: unreachable).
    """

    def __init__(self, admin_url: str, *, timeout_s: float = admin_timeout_s_default,
                 headers: Mapping[str, str] | None = None, ssl_context: ssl.SSLContext | None = None,
                 security: ConnectionSecurity | None = None, authentication: Authentication | None = None) -> None:
        self.admin_url = admin_url.rstrip("/")
        self.timeout_s = timeout_s
        self.headers = dict(headers or {})
        self.security = security or ConnectionSecurity()
        self.authentication = check_authentication(authentication) or self.security.authentication()
        # An explicit context wins; else one is built from `security` on the first https request
        # (and not pickled: an SSLContext does not cross to a Spark executor, the settings do).
        self.ssl_context = ssl_context
        self._built_context: ssl.SSLContext | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_built_context"] = None
        return state

    def _context(self) -> ssl.SSLContext | None:
        if self.ssl_context is not None or not self.admin_url.startswith("https:"):
            return self.ssl_context
        if self._built_context is None:
            self._built_context = ssl_context_for(self.authentication, self.security)
        return self._built_context

    def __repr__(self) -> str:
        return f"AdminClient({self.admin_url!r})"

    # ---- paths ---------------------------------------------------------------------------------

    @staticmethod
    def path(*segments: str) -> str:
        """/admin/v2/ and the segments, each percent-encoded (a name may hold any character)."""
        return "/admin/v2/" + "/".join(urllib.parse.quote(s, safe="") for s in segments)

    @staticmethod
    def topic_path(topic: str | TopicName, *parts: str) -> str:
        """REST path of a topic; short names resolve as everywhere (x -> persistent://public/default/x)."""
        name = topic if isinstance(topic, TopicName) else TopicName.parse(topic)
        return AdminClient.path(name.domain, name.tenant, *name.namespace_part.split("/"), name.local_name, *parts)

    @staticmethod
    def namespace_path(namespace: str, *parts: str) -> str:
        """REST path of a namespace given as tenant/namespace."""
        pieces = namespace.split("/")
        if len(pieces) != 2 or not all(pieces):
            raise ValueError(f"bad namespace {namespace!r}: expected tenant/namespace")
        return AdminClient.path("namespaces", *pieces, *parts)

    # ---- requests ------------------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = NO_BODY, query: Mapping[str, Any] | None = None) -> Any:
        """The response's JSON (text if it is not JSON), or None for an empty (204) response."""
        with self._open(method, path, body, query) as response:
            data = response.read()
        if not data.strip():
            return None
        try:
            return json.loads(data)
        except ValueError:
            return data.decode("utf-8", "replace")

    def request_raw(self, method: str, path: str, query: Mapping[str, Any] | None = None) -> AdminReply:
        """The response as it is: for answers that are not JSON (a peeked message's payload)."""
        with self._open(method, path, NO_BODY, query) as response:
            return AdminReply(response.status, response.headers, response.read())

    def _request(self, method: str, url: str, data: bytes | None) -> urllib.request.Request:
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        for name, value in self.headers.items():
            request.add_header(name, value)
        if self.authentication is not None:
            for name, value in self.authentication.http_headers().items():
                request.add_header(name, value)
        return request

    def _open(self, method: str, path: str, body: Any, query: Mapping[str, Any] | None) -> HTTPResponse:
        url = self.admin_url + path
        if query:
            url += "?" + urllib.parse.urlencode({k: _query_value(v) for k, v in query.items() if v is not None})
        data = None if body is NO_BODY else json.dumps(body).encode()
        request = self._request(method, url, data)
        https = urllib.request.HTTPSHandler(context=self._context())
        opener = urllib.request.build_opener(https, _SameMethodRedirects())
        try:
            response: HTTPResponse = opener.open(request, timeout=self.timeout_s)
        except urllib.error.HTTPError as exc:
            with exc:
                raise AdminError(exc.code, _reason(exc), method, url) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise AdminError(0, f"cannot reach {self.admin_url}: {reason}", method, url) from None
        return response


class _SameMethodRedirects(urllib.request.HTTPRedirectHandler):
    """307 and 308 repeat the request at the new URL with the same method, body and headers (RFC 9110
    §15.4.8): a broker of several workers redirects a topic's call to the worker that owns it, as
    Pulsar's brokers redirect to each other. urllib alone follows them for GET and HEAD only.
    301/302/303 keep urllib's handling."""

    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: HTTPMessage, newurl: str
    ) -> urllib.request.Request | None:
        if code not in (307, 308):
            return super().redirect_request(req, fp, code, msg, headers, newurl)
        # req.headers holds what add_header set (not Host or Content-Length: those are recomputed).
        return urllib.request.Request(newurl, data=req.data, headers=dict(req.headers), method=req.get_method(),
                                      origin_req_host=req.origin_req_host, unverifiable=True)


def _query_value(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _reason(exc: urllib.error.HTTPError) -> str:
    """The `reason` of Pulsar's JSON error body, else the body's text, else the HTTP reason phrase."""
    try:
        body = exc.read()
    except OSError:
        return str(exc.reason)
    try:
        parsed = json.loads(body)
    except ValueError:
        text = body.decode("utf-8", "replace").strip()
        return text[:error_reason_chars_max] or str(exc.reason)
    if isinstance(parsed, dict) and isinstance(parsed.get("reason"), str):
        return str(parsed["reason"])
    return str(exc.reason)
