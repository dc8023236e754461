"""Several broker processes on one machine: `velamq standalone --workers N` (issue 23, docs/workers.md).

Python runs one thread of bytecode at a time per process, so a broker uses more cores as more
processes, and Pulsar already says how clients find the process that serves a topic: a lookup
answers with the owner's URL. The rooms of this package:

    _sockets      every listening socket, bound once by the supervisor; what a worker is told
    _supervisor   starts the workers, restarts one that dies, stops them on SIGTERM
    _worker       one worker: a whole VelamqServer (velamq/server.py) on the supervisor's sockets
    _ownership    which worker serves which namespace bundle (velamq/_bundles.py), over the
                  shared metadata: the broker's Ownership and the admin server's routing

Tier 3 with the composition root it builds on (server.py); only the CLI imports it.
"""

from velamq.workers._ownership import WorkerOwnership
from velamq.workers._sockets import WorkerSpec, worker_spec_from_environment
from velamq.workers._supervisor import Supervisor
from velamq.workers._worker import serve_worker

__all__ = ["Supervisor", "WorkerOwnership", "WorkerSpec", "serve_worker", "worker_spec_from_environment"]
