"""A real S3-compatible server on loopback for the remote ``output_dir`` tests: moto's server app, in a thread.

moto's WSGI app (what ``moto_server`` and ``ThreadedMotoServer`` serve) behind werkzeug's threaded server on a free
port of 127.0.0.1, with an optional delay before every request (a slow or far endpoint). Credentials are dummies:
moto accepts any.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")
from moto.server import DomainDispatcherApplication, create_backend_app  # noqa: E402
from werkzeug.serving import make_server  # noqa: E402


class S3Server:
    """moto's S3 on ``endpoint``; ``delay_s`` is slept before each request is served."""

    def __init__(self) -> None:
        self.delay_s = 0.0
        self.requests: list[tuple[str, str, str | None]] = []  # method, path, Range header
        app = DomainDispatcherApplication(create_backend_app)

        def slow(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
            self.requests.append((environ["REQUEST_METHOD"], environ["PATH_INFO"], environ.get("HTTP_RANGE")))
            if self.delay_s:
                time.sleep(self.delay_s)
            return app(environ, start_response)  # type: ignore[no-any-return]

        self._server = make_server("127.0.0.1", 0, slow, threaded=True)
        self.endpoint = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.running = True

    @property
    def options(self) -> dict[str, Any]:
        """``storage_options`` that reach this server (fresh fsspec instance, no listing cache)."""
        return {"client_kwargs": {"endpoint_url": self.endpoint}, "skip_instance_cache": True,
                "use_listings_cache": False}

    def fs(self) -> Any:
        import s3fs

        return s3fs.S3FileSystem(**self.options)

    def stop(self) -> None:
        """Stop serving and close the socket: the endpoint then refuses connections."""
        if self.running:
            self.running = False
            self._server.shutdown()
            self._server.server_close()


@pytest.fixture(name="s3")
def s3_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    import s3fs

    # fsspec keeps one S3FileSystem per set of arguments, made with the environment of its time: a Lightning logger's
    # S3FileSystem() from an earlier test would reach that test's endpoint with its credentials, not this server
    s3fs.S3FileSystem.clear_instance_cache()
    server = S3Server()
    try:
        yield server
    finally:
        server.stop()
        s3fs.S3FileSystem.clear_instance_cache()
