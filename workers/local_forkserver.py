"""The fork server that local workers fork from, startable before anything else is imported.

Local workers fork from one `multiprocessing` fork server that has imported the worker module once, so W workers
cost one interpreter start, not W. `boot()` starts that server and returns at once: the server is a separate
process that imports the worker module while the caller goes on (imports, store, range). The first worker forked
afterwards waits only for whatever is left of that boot. This module imports nothing of the project but
vocab.processes (the standard library only), so `bisect start` can call it before its heavy imports.

multiprocessing keeps the server's socket in a `pymp-*` folder of the temp dir that only a clean exit of the process
that started it removes. The folder is marked with its owner (vocab.processes), and each boot first removes the
marked folders of gpu-bisect processes of this host that are gone (killed outright); others are never touched.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import multiprocessing.forkserver
import multiprocessing.util
import shutil
import tempfile
from pathlib import Path

from bisector.vocab.processes import OWNER_MARK, mark_owner, owner_is_gone

SERVER_PRELOAD = "bisector.workers.local_server"  # imported once by the server: each worker is forked with it loaded


def boot() -> multiprocessing.context.ForkServerContext:
    """The fork-server context of the local workers, its server started (a no-op when it runs already)."""
    context = multiprocessing.get_context("forkserver")
    assert isinstance(context, multiprocessing.context.ForkServerContext)
    context.set_forkserver_preload([SERVER_PRELOAD])
    claim_temp_dir()
    multiprocessing.forkserver.ensure_running()
    return context


def claim_temp_dir() -> Path:
    """multiprocessing's temp folder of this process (where the fork server's socket lives), marked as this
    process's; the marked folders of gone owners are removed first."""
    for folder in Path(tempfile.gettempdir()).glob("pymp-*"):
        if owner_is_gone(folder):
            shutil.rmtree(folder, ignore_errors=True)
    folder = Path(multiprocessing.util.get_temp_dir())
    if not (folder / OWNER_MARK).exists():
        mark_owner(folder)
    return folder
