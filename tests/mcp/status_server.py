"""An HTTP server that answers every request with one status (``python status_server.py
401``): what a URL that is not an MCP server, or one that refuses us, looks like. Prints
its loopback port on stdout once listening."""

from __future__ import annotations

import http.server
import sys

CODE = int(sys.argv[1])


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = b"nope"
        self.send_response(CODE)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_DELETE = do_POST

    def log_message(self, *args: object) -> None:
        pass


if __name__ == "__main__":
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()
