"""What the local workers' fork server imports before it forks any worker (workers/local_forkserver.py).

The worker module, then every object the imports made frozen (gc.freeze): the workers forked from the server share
them copy-on-write without a collection touching them, and the server's own exit, when the coordinator's ends, does
not walk them.
"""

import gc

import workers.local  # noqa: F401  (what every worker runs)

gc.freeze()
