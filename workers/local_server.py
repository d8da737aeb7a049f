"""What the local workers' fork server imports before it forks any worker (workers/local_forkserver.py).

The worker module and what a worker imports only when it runs a step (the step runner; `regex`, which runs the
metric and infrastructure patterns): the coordinator imports workers.local too but needs neither. Then every object
the imports made is frozen (gc.freeze): the workers forked from the server share them copy-on-write without a
collection touching them, and the server's own exit, when the coordinator's ends, does not walk them.
"""

import gc

import regex  # noqa: F401

import bisector.workers.local
import bisector.workers.step  # noqa: F401

gc.freeze()
