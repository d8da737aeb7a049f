"""The web dashboard: a read-only FastAPI app over the store (pages, JSON API, step logs)."""
