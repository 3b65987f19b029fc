#!/usr/bin/env python3
"""A small fault-injecting HTTP proxy for the setup tests (stdlib only).

Forwards GET requests to an upstream server (nginx serving the hub layout)
without following redirects, and damages responses on purpose:

  --p-reset P      reset the connection (RST) midway through the body
  --p-short P      send a short body, then close cleanly
  --p-badrange P   answer a range with a Content-Range shifted by one byte
  --p-500 P        answer 500 Internal Server Error
  --status CODE:REGEX   always answer CODE for paths matching REGEX (401, 404, ...)
  --require-token T     answer 401 unless "Authorization: Bearer T" is sent
  --rate BYTES/S   throttle all bodies together (an emulated link)
  --latency-ms N   wait N ms before each response (an emulated round trip)
  --latency-rx RX  only before responses to paths matching RX (default: all)
  --flip-first N   flip one byte in the middle of the body of the first N
                   responses on --only paths (a transient corrupting hop)
  --only REGEX     faults only on paths matching REGEX (default: /cdn/)
  --cdn-base URL   rewrite a relative redirect Location ("/cdn/...") to URL +
                   Location: the blobs then live on another host (e.g. a
                   second proxy), as the hub's CDN does
  --sign N         emulate signed, expiring CDN URLs: each redirect Location
                   to /cdn/ gets a fresh "?sig=..." and a /cdn/ request is
                   served only with a sig used fewer than N times before
                   (403 otherwise, as an expired signed URL answers)
  --limit-after K  rate limiting: after K requests on --only paths a window
                   of --limit-s seconds opens in which every request is
                   answered 429 (or 503 with --limit-style 503), telling the
                   time left as --limit-style says: retry-after (seconds),
                   date (an HTTP date), ratelimit (the hub's RateLimit and
                   RateLimit-Policy headers only), none (nothing), 503
                   (503 + Retry-After seconds). --limit-windows N windows
                   (each after K more requests; default 1). A request that
                   arrives inside a window more than --limit-grace seconds
                   (default 0.5: requests already on their way when the first
                   429 went out) after its first 429 is logged "early".
  POST /api/models/{repo}/paths-info/{rev} (the hub's paths-info API, JSON
                   {"paths": [...]}) is answered from upstream's tree
                   (/api/models/{repo}/tree/{rev}): the entries of those paths
  --ignore-range   forward without the Range header: upstream answers 200
                   with the whole file (a server or proxy that ignores Range)

Faults are drawn from a seeded generator, one draw per request. Every request
is logged to --log as: path range status bytes_sent fault auth(yes/no) arrival
(epoch seconds, when the request was read).
"""
import argparse
import email.utils
import http.client
import json
import http.server
import random
import re
import socket
import struct
import sys
import threading
import time


class Bucket:
    """A token bucket shared by every connection: the emulated link."""

    def __init__(self, rate):
        self.rate = rate
        self.lock = threading.Lock()
        self.t = time.monotonic()
        self.tokens = 0.0

    def take(self, n):
        if self.rate <= 0:
            return
        with self.lock:
            now = time.monotonic()
            self.tokens = min(self.tokens + (now - self.t) * self.rate, self.rate * 0.05)
            self.t = now
            self.tokens -= n
            wait = -self.tokens / self.rate if self.tokens < 0 else 0
        if wait > 0:
            time.sleep(wait)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", type=int, required=True)
    ap.add_argument("--upstream", type=int, required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--p-reset", type=float, default=0)
    ap.add_argument("--p-short", type=float, default=0)
    ap.add_argument("--p-badrange", type=float, default=0)
    ap.add_argument("--p-500", type=float, default=0)
    ap.add_argument("--status", action="append", default=[])
    ap.add_argument("--require-token")
    ap.add_argument("--rate", type=float, default=0)
    ap.add_argument("--latency-ms", type=float, default=0)
    ap.add_argument("--latency-rx", default="")
    ap.add_argument("--flip-first", type=int, default=0)
    ap.add_argument("--only", default="/cdn/")
    ap.add_argument("--log")
    ap.add_argument("--cdn-base")
    ap.add_argument("--sign", type=int, default=0)
    ap.add_argument("--limit-after", type=int, default=-1)
    ap.add_argument("--limit-s", type=float, default=2.0)
    ap.add_argument("--limit-style", default="retry-after",
                    choices=["retry-after", "date", "ratelimit", "none", "503"])
    ap.add_argument("--limit-windows", type=int, default=1)
    ap.add_argument("--limit-grace", type=float, default=0.5)
    ap.add_argument("--ignore-range", action="store_true")
    a = ap.parse_args()
    lim_lock = threading.Lock()
    lim = {"count": 0, "start": None, "end": 0.0, "windows": 0}
    rng = random.Random(a.seed)
    rng_lock = threading.Lock()
    log_lock = threading.Lock()
    logf = open(a.log, "a", buffering=1) if a.log else None
    statuses = [(int(s.split(":", 1)[0]), re.compile(s.split(":", 1)[1])) for s in a.status]
    only = re.compile(a.only)
    bucket = Bucket(a.rate)
    flips = [0]
    sig_lock = threading.Lock()
    sig_uses = {}
    sig_next = [0]

    def sign_ok(path):
        """A /cdn/ request under --sign: its sig known and not used up."""
        m = re.search(r"[?&]sig=([0-9a-z-]+)", path)
        with sig_lock:
            if not m or m.group(1) not in sig_uses or sig_uses[m.group(1)] >= a.sign:
                return False
            sig_uses[m.group(1)] += 1
            return True

    def rewrite_location(v):
        if a.sign and v.startswith("/cdn/"):
            with sig_lock:
                sig_next[0] += 1
                sig = "%d-%d" % (a.listen, sig_next[0])
                sig_uses[sig] = 0
            v += ("&" if "?" in v else "?") + "sig=" + sig
        if a.cdn_base and v.startswith("/"):
            v = a.cdn_base.rstrip("/") + v
        return v

    def draw():
        with rng_lock:
            x = rng.random()
        for name, p in (("reset", a.p_reset), ("short", a.p_short), ("badrange", a.p_badrange),
                        ("500", a.p_500)):
            if x < p:
                return name
            x -= p
        return ""

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self):
            super().setup()
            # headers go out in several small writes: without this, Nagle and
            # delayed ACKs add ~40 ms to every response
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, *args):
            pass

        def record(self, status, sent, fault):
            if logf:
                auth = "yes" if self.headers.get("Authorization") else "no"
                with log_lock:
                    logf.write("%s %s %d %d %s %s %.6f\n" % (
                        self.path, self.headers.get("Range", "-").replace(" ", ""), status, sent,
                        fault or "-", auth, self.t_arrival))

        def limited(self):
            """Rate limiting: None, or (code, headers, fault) to answer now."""
            if a.limit_after < 0:
                return None
            now = self.t_arrival
            with lim_lock:
                if lim["start"] is not None and now >= lim["end"]:
                    lim["start"] = None  # the window is over
                    lim["count"] = 0
                if lim["start"] is None:
                    if not only.search(self.path) or lim["windows"] >= a.limit_windows:
                        return None
                    lim["count"] += 1
                    if lim["count"] <= a.limit_after:
                        return None
                    lim["start"], lim["end"] = now, now + a.limit_s
                    lim["windows"] += 1
                start, end = lim["start"], lim["end"]
            fault = "early" if now > start + a.limit_grace else "ratelimit"
            left = max(1, int(end - now + 0.999))
            code, hdrs = 429, []
            if a.limit_style == "retry-after":
                hdrs.append(("Retry-After", str(left)))
            elif a.limit_style == "date":
                hdrs.append(("Retry-After", email.utils.formatdate(int(end + 0.999), usegmt=True)))
            elif a.limit_style == "ratelimit":
                hdrs.append(("RateLimit", '"resolvers";r=0;t=%d' % left))
                hdrs.append(("RateLimit-Policy", '"fixed window";"resolvers";q=3000;w=300'))
            elif a.limit_style == "503":
                code = 503
                hdrs.append(("Retry-After", str(left)))
            return code, hdrs, fault

        def plain(self, code, msg):
            body = (msg + "\n").encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.record(code, len(body), "status")

        def do_POST(self):
            self.t_arrival = time.time()
            m = re.match(r"^/api/models/(.+)/paths-info/([^/?]+)$", self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))
            if not m:
                return self.plain(404, "no such API")
            up = http.client.HTTPConnection("127.0.0.1", a.upstream, timeout=30)
            up.request("GET", "/api/models/%s/tree/%s" % (m.group(1), m.group(2)))
            r = up.getresponse()
            tree = r.read()
            up.close()
            if r.status != 200:
                return self.plain(r.status, "no tree")
            want = set(json.loads(body or b"{}").get("paths", []))
            out = json.dumps([e for e in json.loads(tree) if e.get("path") in want]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            self.record(200, len(out), "")

        def do_GET(self):
            self.t_arrival = time.time()
            lt = self.limited()
            if lt:
                code, hdrs, fault = lt
                body = b"Too Many Requests\n"
                self.send_response(code)
                for k, v in hdrs:
                    self.send_header(k, v)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                self.record(code, len(body), fault)
                return
            if a.latency_ms and re.search(a.latency_rx, self.path):
                time.sleep(a.latency_ms / 1000.0)
            for code, rx in statuses:
                if rx.search(self.path):
                    return self.plain(code, "injected %d" % code)
            if a.require_token and self.headers.get("Authorization") != "Bearer " + a.require_token:
                return self.plain(401, "Invalid credentials in Authorization header")
            if a.sign and self.path.startswith("/cdn/") and not sign_ok(self.path):
                return self.plain(403, "Request has expired")
            fault = draw() if only.search(self.path) else ""
            if not fault and only.search(self.path):
                with rng_lock:
                    if flips[0] < a.flip_first:
                        flips[0] += 1
                        fault = "flip"
            if fault == "500":
                return self.plain(500, "injected server error")
            up = http.client.HTTPConnection("127.0.0.1", a.upstream, timeout=30)
            hdrs = {}
            if "Range" in self.headers and not a.ignore_range:
                hdrs["Range"] = self.headers["Range"]
            if a.ignore_range and "Range" in self.headers and not fault:
                fault = "norange"
            up.request("GET", self.path, headers=hdrs)
            r = up.getresponse()
            body = r.read()
            up.close()
            self.send_response(r.status)
            for k, v in r.getheaders():
                kl = k.lower()
                if kl in ("connection", "keep-alive", "transfer-encoding", "server", "date"):
                    continue
                if kl == "location":
                    v = rewrite_location(v)
                if kl == "content-range" and fault == "badrange":
                    m = re.match(r"bytes (\d+)-(\d+)/(\d+)", v)
                    if m:
                        b, e, t = int(m.group(1)), int(m.group(2)), int(m.group(3))
                        v = "bytes %d-%d/%d" % (b + 1, min(e + 1, t - 1), t)
                self.send_header(k, v)
            self.end_headers()
            if fault == "flip" and body:
                k = len(body) // 2
                body = body[:k] + bytes([body[k] ^ 0x20]) + body[k + 1:]
            n = len(body)
            if fault in ("reset", "short") and n > 1:
                n = max(1, n // 2)
            sent = 0
            step = 16384
            try:
                while sent < n:
                    k = min(step, n - sent)
                    bucket.take(k)
                    self.wfile.write(body[sent:sent + k])
                    sent += k
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.record(r.status, sent, fault)
            if fault == "reset":
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
                self.close_connection = True
            elif fault == "short":
                self.close_connection = True

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", a.listen), H)
    srv.daemon_threads = True
    srv.handle_error = lambda request, addr: None  # clients hanging up mid-body are expected
    sys.stderr.write("faultproxy: 127.0.0.1:%d -> 127.0.0.1:%d\n" % (a.listen, a.upstream))
    sys.stderr.flush()
    srv.serve_forever()


if __name__ == "__main__":
    main()
