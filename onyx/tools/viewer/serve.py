"""``onyx view --serve``: the page from an HTTP server on localhost (for a browser on a remote
desktop, or one that refuses file:// pages)."""

from __future__ import annotations

import http.server
import threading


class _PageServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    page: bytes = b""

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802  (the stdlib's name)
        page = self.server.page
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, format, *args) -> None:  # quiet: the command prints the address
        pass


def make_server(page: bytes, host: str = "127.0.0.1", port: int = 0) -> _PageServer:
    server = _PageServer((host, port), _Handler)
    server.page = page
    return server


def serve_in_background(page: bytes, host: str = "127.0.0.1", port: int = 0) -> _PageServer:
    """A started server on a daemon thread (tests, notebooks); ``shutdown()`` stops it."""
    server = make_server(page, host, port)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
