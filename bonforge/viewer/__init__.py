"""`bonforge view`: a local web app over a store's catalog (runs, problems, candidates, GenSelect prompts,
FusioN attributions, a read-only SQL box). ``app.create_app`` builds it; ``serve`` runs it with uvicorn."""

from __future__ import annotations

from urllib.parse import quote

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def url(host: str, port: int, token: str | None, run_id: str | None = None) -> str:
    shown = f"[{host}]" if ":" in host else host
    query = "&".join(f"{k}={quote(v)}" for k, v in (("token", token), ("run", run_id)) if v)
    return f"http://{shown}:{port}/" + (f"?{query}" if query else "")


def serve(store, host: str = "127.0.0.1", port: int = 8765, run_id: str | None = None, echo=print,
          limits=None) -> None:
    """Serve the viewer until stopped. A host other than loopback gets a fresh token, printed in the URL.
    ``limits``: what one query may use (``bonforge.viewer.sql.Limits``)."""
    import uvicorn

    from bonforge.viewer.app import create_app, new_token
    from bonforge.viewer.sql import Limits

    token = None if host in LOOPBACK_HOSTS else new_token()
    app = create_app(store, token=token, limits=limits or Limits())
    echo(f"bonforge view: {url(host, port, token, run_id)}  (Ctrl-C stops it)")
    uvicorn.run(app, host=host, port=port, log_level="warning")
