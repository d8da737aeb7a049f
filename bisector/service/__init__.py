"""Service mode (`bisect serve`): bisects submitted over HTTP, queued, run by coordinators in threads of the
server over one shared pool of worker slots (workers/pool.py), and resumed when the server restarts."""
