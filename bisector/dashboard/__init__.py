"""The web dashboard: a FastAPI app over the store (pages, JSON API, step logs), read-only unless `bisect serve`
adds its routes and forms (service_routes.py, actions.py)."""
