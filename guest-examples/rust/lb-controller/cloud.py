#!/usr/bin/env python3
"""A stand-in for a cloud's load-balancer API, for lb-controller's tests and demo.

Dependency-free (Python 3 standard library), in memory, on 127.0.0.1 only.

    GET    /lbs        200, a JSON list of {"id", "service", "ports", "address"}
    GET    /lbs/ID     200 with the load balancer, or 404
    PUT    /lbs/ID     body {"service": "ns/name", "ports": [...]}: creates the load balancer
                       (201) or updates it (200), keeping its address; answers the load balancer
    DELETE /lbs/ID     204, or 404 when there is none

Addresses come from 203.0.113.0/24 (TEST-NET-3), one per load balancer, reused after a delete.
`--port 0` picks a free port; the first line on stdout is `listening on http://127.0.0.1:PORT`.
"""

import argparse
import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ID = re.compile(r"^[A-Za-z0-9-]{1,128}$")
MAX_BODY = 1 << 20


class Cloud:
    """The load balancers, guarded by one lock (the server runs a thread per request)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.lbs = {}

    def _free_address(self):
        used = {lb["address"] for lb in self.lbs.values()}
        for host in range(1, 255):
            address = f"203.0.113.{host}"
            if address not in used:
                return address
        return None

    def list(self):
        with self.lock:
            return [dict(lb) for lb in self.lbs.values()]

    def get(self, lb_id):
        with self.lock:
            lb = self.lbs.get(lb_id)
            return dict(lb) if lb else None

    def put(self, lb_id, service, ports):
        """Returns (created, load balancer), or (None, None) when no address is free."""
        with self.lock:
            lb = self.lbs.get(lb_id)
            created = lb is None
            if created:
                address = self._free_address()
                if address is None:
                    return None, None
                lb = {"id": lb_id, "address": address}
                self.lbs[lb_id] = lb
            lb["service"] = service
            lb["ports"] = ports
            return created, dict(lb)

    def delete(self, lb_id):
        with self.lock:
            return self.lbs.pop(lb_id, None) is not None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "cloud-standin/1"

    def log_message(self, fmt, *args):
        sys.stderr.write("cloud: %s\n" % (fmt % args))

    def _send(self, code, body=None):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(code)
        # One request per connection: a refused request may leave an unread body behind.
        self.close_connection = True
        self.send_header("Connection", "close")
        if code != 204:
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if code != 204:
            self.wfile.write(data)

    def _error(self, code, message):
        self._send(code, {"error": message})

    def _lb_id(self):
        """The ID of /lbs/ID, "" for /lbs, None for any other path (after a 404 was sent)."""
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/lbs":
            return ""
        if path.startswith("/lbs/") and ID.match(path[len("/lbs/"):]):
            return path[len("/lbs/"):]
        self._error(404, f"no such resource: {path}")
        return None

    def do_GET(self):
        lb_id = self._lb_id()
        if lb_id is None:
            return
        if lb_id == "":
            self._send(200, self.server.cloud.list())
            return
        lb = self.server.cloud.get(lb_id)
        if lb is None:
            self._error(404, f"load balancer {lb_id} not found")
        else:
            self._send(200, lb)

    def do_PUT(self):
        lb_id = self._lb_id()
        if lb_id is None:
            return
        if lb_id == "":
            self._error(405, "PUT needs /lbs/ID")
            return
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit() or int(length) > MAX_BODY:
            self._error(411, "a Content-Length of at most 1 MiB is required")
            return
        try:
            body = json.loads(self.rfile.read(int(length)))
            service, ports = body["service"], body.get("ports", [])
            if not isinstance(service, str) or not isinstance(ports, list):
                raise ValueError("service must be a string and ports a list")
        except (ValueError, KeyError, TypeError) as e:
            self._error(400, f"bad body: {e}")
            return
        created, lb = self.server.cloud.put(lb_id, service, ports)
        if lb is None:
            self._error(503, "no free address in 203.0.113.0/24")
        else:
            self._send(201 if created else 200, lb)

    def do_DELETE(self):
        lb_id = self._lb_id()
        if lb_id is None:
            return
        if lb_id == "":
            self._error(405, "DELETE needs /lbs/ID")
        elif self.server.cloud.delete(lb_id):
            self._send(204)
        else:
            self._error(404, f"load balancer {lb_id} not found")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free one)")
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.cloud = Cloud()
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
