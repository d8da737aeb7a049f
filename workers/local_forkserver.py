"""The fork server that local workers fork from, startable before anything else is imported.

Local workers fork from one `multiprocessing` fork server that has imported the worker module once, so W workers
cost one interpreter start, not W. `boot()` starts that server and returns at once: the server is a separate
process that imports the worker module while the caller goes on (imports, store, range). The first worker forked
afterwards waits only for whatever is left of that boot. This module imports nothing of the project, so `bisect
start` can call it before its heavy imports.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import multiprocessing.forkserver

SERVER_PRELOAD = "workers.local_server"  # imported once by the server: each worker is forked with it loaded


def boot() -> multiprocessing.context.ForkServerContext:
    """The fork-server context of the local workers, its server started (a no-op when it runs already)."""
    context = multiprocessing.get_context("forkserver")
    assert isinstance(context, multiprocessing.context.ForkServerContext)
    context.set_forkserver_preload([SERVER_PRELOAD])
    multiprocessing.forkserver.ensure_running()
    return context
