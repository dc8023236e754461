"""The admin tier: Pulsar's admin REST v2 subset, HTTP lookup, Prometheus metrics, web console.

    server = AdminServer(backend, "0.0.0.0", 8080)   # backend: a BrokerBackend (velamq.broker.BrokerAdmin)
    await server.start(); server.port; server.web_service_url; await server.close()

The HTTP/1.1 server is our own, on asyncio streams (_http.py); routes live in _routes_*.py.
"""

from velamq.admin._backend import BrokerBackend
from velamq.admin._server import AdminServer, AdminSockets
from velamq.admin._worker_routing import WorkerRouting

__all__ = ["AdminServer", "AdminSockets", "BrokerBackend", "WorkerRouting"]
