"""The HTTP/1.1 side: parse a request, apply the realism knobs, send the answer.

One thread per connection (``ThreadingHTTPServer``), keep-alive, ``TCP_NODELAY``. Object data
goes out as memoryview slices or ``sendfile`` ranges, never as a copy of the whole object.
"""

from __future__ import annotations

import logging
import re
import socket
import struct
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

from fake_gcs import liveness
from fake_gcs.app import api_method
from fake_gcs.errors import GCSError
from fake_gcs.knobs import Throttle
from fake_gcs.request import Headers, Media, Request, Response, error_response, json_response
from fake_gcs.retry_test import Fault, fault_for
from fake_gcs.stats import classify

logger = logging.getLogger(__name__)
_HOST_RE = re.compile(r"^[A-Za-z0-9.\-]+(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$")
PIECE = 256 << 10  # bytes per write when throttling or cutting


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake_gcs"
    sys_version = ""
    timeout = 300  # seconds an idle keep-alive connection is kept
    rbufsize = 1 << 16

    def version_string(self) -> str:
        return self.server_version

    # ----------------------------------------------------------- connection
    def setup(self) -> None:
        super().setup()
        try:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        self.server.track(self.connection, True)
        threading.current_thread().name = f"{self.server.thread_prefix}{self.client_address[1]}"
        self.conn_stats = self.server.stats.connection_opened()
        mbps = self.server.faults.knobs.bandwidth_mbps
        self.throttle = Throttle(mbps, sleep=self._pause) if mbps else None

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.track(self.connection, False)
            self.server.stats.connection_closed(self.conn_stats)

    def _pause(self, seconds: float) -> None:
        """Sleep ``seconds`` unless the client goes away (then :class:`~fake_gcs.liveness.ClientGone`)."""
        what = f"{self.command} {self.path[:200]}"
        try:
            liveness.pause(self.connection, seconds, self.server.stopping, what)
        except liveness.ClientGone:
            self.client_left = True
            raise

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - base class signature
        logger.debug("%s - %s", self.client_address[0], format % args)

    def log_request(self, code="-", size="-") -> None:
        pass  # one line per request is logged by _handle, with its timing

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Errors the base class raises (bad request line, huge headers...), in GCS's JSON shape."""
        if code == HTTPStatus.NOT_IMPLEMENTED:  # an unknown method: GCS answers 405
            code, message = 405, f"Method {self.command!r} is not allowed."
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "Error"
        body = GCSError(code, message or phrase).to_json()
        self.close_connection = True
        if self.request_version == "HTTP/0.9":  # unparsable request line: still answer HTTP/1.1
            self.request_version = "HTTP/1.1"
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Connection", "close")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD" and code >= 200 and code not in (204, 304):
                self.wfile.write(body)
        except OSError:
            pass

    # ------------------------------------------------------------- requests
    def _base_url(self) -> str:
        host = self.headers.get("Host", "")
        if not host or not _HOST_RE.match(host):
            host = self.server.host_port
        return f"http://{host}"

    def _handle(self) -> None:
        t0 = time.perf_counter()
        target = self.path
        if "://" in target.split("?", 1)[0]:  # absolute-form request target
            parts = urlsplit(target)
            target = parts.path + ("?" + parts.query if parts.query else "")
        path, _, query = target.partition("?")
        if path == "/_stats" or path.startswith("/_stats/"):
            self._stats_endpoint(path, query)
            return
        faults = self.server.faults
        stats = self.server.stats
        req = None
        resp = None
        admitted = gone = False
        sent = -1
        self.client_left = False
        self.connection.settimeout(self.server.app.limits.body_timeout_s)
        try:
            try:
                req = Request(
                    self.command,
                    path,
                    query,
                    Headers(self.headers.items()),
                    self.rfile,
                    self._base_url(),
                    self.throttle,
                )
            finally:
                api = api_method(self.command, path)
                ranged = "Range" in self.headers
                stats.request_started(self.conn_stats, self.command, classify(path, api, req), api, ranged)
                if req is not None:
                    req.api_method = api
            if faults.slots is not None and not faults.slots.acquire(blocking=False):
                stats.queue(1)
                try:
                    what = f"{self.command} {path[:200]}"
                    liveness.acquire(faults.slots, self.connection, self.server.stopping, what)
                finally:
                    stats.queue(-1)
            admitted = True
            stats.admitted()
            if self.throttle is not None:
                self.throttle.begin(faults.rate_factor())
            resp, sent = self._serve(req, faults)
        except GCSError as err:  # the request line or headers were bad: answer at once
            resp = error_response(err)
            self.close_connection = True
            try:
                sent = self._answer(resp, 0.0, None)
            except OSError:
                pass
        except OSError as exc:
            gone = isinstance(exc, liveness.ClientGone)
            logger.debug("connection lost on %s %s: %s", self.command, path[:200], exc)
            self.close_connection = True
        finally:
            if admitted and faults.slots is not None:
                faults.slots.release()
            stats.request_done(admitted, sent, gone)
            if resp is not None:
                resp.close()
            if not self.close_connection:
                self.connection.settimeout(self.timeout)  # back to the keep-alive idle timeout
        logger.debug(
            "%s %s -> %s (%d bytes, %.1f ms)",
            self.command,
            self.path[:200],
            resp.status if resp is not None else "-",
            sent,
            (time.perf_counter() - t0) * 1e3,
        )

    def _serve(self, req: Request, faults) -> tuple[Response | None, int]:
        """Apply the knobs and faults to ``req``, answer it; (response, body bytes sent)."""
        req.slow_after = self.server.app.limits.body_timeout_s
        fault = None
        try:
            delay = faults.first_byte_delay()
            status = faults.error_status()
            if status is not None:
                resp = error_response(GCSError(status, "Injected fault: please retry."))
            elif self._maybe_cut_upload(req):
                return None, -1
            else:
                fault = self._fault(req)
                if fault is not None and fault.kind == "status":
                    fault.consume()
                    code = fault.instruction.status
                    resp = error_response(GCSError(code, f"Retry Test: Caused a {code}"))
                elif fault is not None and fault.kind == "reset":
                    fault.consume()
                    self._reset_connection()
                    logger.debug("injected reset of %s %s", self.command, req.path[:200])
                    return None, -1
                else:
                    req.fault = fault
                    req.pause = self._pause
                    resp = self.server.app.handle(req)
                    if self.client_left:  # an upload stall noticed its client leave
                        resp.close()
                        raise liveness.ClientGone(f"the client of {self.command} {req.path[:200]} left")
        except GCSError as err:
            delay, resp = 0.0, error_response(err)
        if req.bad_length or not req.drain():
            self.close_connection = True
        try:
            return resp, self._answer(resp, delay, fault, req._got)
        except BaseException:
            resp.close()
            raise

    def _answer(self, resp: Response, delay: float, fault: Fault | None, received: int = 0) -> int:
        """Wait out the first-byte latency, then send ``resp``; body bytes sent."""
        if delay:
            self._pause(delay)
            if self.throttle is not None:
                self.throttle.restart()  # the latency sleep earns no bandwidth credit
        self.server.stats.answering(resp.status, received)
        return self._send(resp, self.command == "HEAD", fault)

    def _stats_endpoint(self, path: str, query: str) -> None:
        """``GET /_stats``; ``POST /_stats/reset`` or ``DELETE /_stats`` zero the counters."""
        stats = self.server.stats
        action = path[len("/_stats") :].strip("/")
        req = None
        try:
            req = Request(self.command, path, query, Headers(self.headers.items()), self.rfile)
            if req.bad_length or not req.drain(1 << 20):
                self.close_connection = True
            if action == "" and self.command in ("GET", "HEAD"):
                resp = json_response(stats.snapshot())
            elif (action, self.command) in (("", "DELETE"), ("reset", "POST")):
                stats.reset()
                resp = json_response(stats.snapshot())
            elif action in ("", "reset"):
                raise GCSError(
                    405,
                    f"Method {self.command} is not allowed for {path}: "
                    "use GET /_stats, POST /_stats/reset or DELETE /_stats.",
                )
            else:
                raise GCSError(404, f"Not Found: {path[:200]} (use GET /_stats or POST /_stats/reset)")
        except GCSError as err:
            resp = error_response(err)
            if req is None:  # the body was not read: the connection cannot be reused
                self.close_connection = True
        try:
            self._send(resp, self.command == "HEAD")
        except OSError:
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle

    def _fault(self, req: Request) -> Fault | None:
        """The Retry Test (or per-request header) fault this request asks for, if any."""
        if not (
            "x-retry-test-id" in req.headers
            or "x-goog-emulator-instructions" in req.headers
            or "x-goog-testbench-instructions" in req.headers
            or "x-retry-test-id" in req.params
        ):
            return None
        if req.api_method is None:
            req.api_method = api_method(req.method, req.path)
        fault = fault_for(self.server.app, req, req.api_method)
        if fault is not None:
            fault.method = req.api_method
        return fault

    def _reset_connection(self) -> None:
        """Close with SO_LINGER 0: the client sees "connection reset by peer"."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass

    def _maybe_cut_upload(self, req: Request) -> bool:
        """Drop the connection half-way through an upload body (fault injection)."""
        length = req.declared_length
        if self.command not in ("POST", "PUT") or not length or not req.path.startswith("/upload/"):
            return False
        cut = self.server.faults.cut_point(length)
        if cut is None:
            return False
        if cut:
            self.rfile.read(cut)
        self._abort_connection()
        logger.debug(
            "injected cut of %s %s after %d/%d body bytes", self.command, req.path[:200], cut, length
        )
        return True

    def _abort_connection(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # ------------------------------------------------------------- responses
    def _send(self, resp: Response, head_only: bool, fault: Fault | None = None) -> int:
        media = resp.media
        length = media.length if media is not None else len(resp.body)
        self.send_response(resp.status)
        for name, value in resp.headers:
            self.send_header(name, value)
        no_body = resp.status in (204, 304) or resp.status < 200
        if not no_body:
            self.send_header("Content-Length", str(length))
        if self.close_connection:
            self.send_header("Connection", "close")
        if head_only or no_body:
            self.end_headers()
            return 0
        if fault is not None and not fault.consumed and self._body_fault(fault, resp):
            self.end_headers()
            return self._send_faulted(resp, length, fault)
        if media is None:
            if self.throttle is None:
                self._headers_buffer.append(b"\r\n" + resp.body)  # one write for small answers
                self.flush_headers()
            else:
                self.end_headers()
                self._write_throttled(memoryview(resp.body), len(resp.body))
            return length
        self.end_headers()
        cut = self.server.faults.cut_point(length)
        if cut is not None:
            self._send_media(media, cut)
            self._abort_connection()
            logger.debug("injected cut of a download after %d/%d bytes", cut, length)
            return cut
        self._send_media(media, length)
        return length

    def _write_throttled(self, view: memoryview, count: int) -> None:
        for offset in range(0, count, PIECE):
            piece = view[offset : min(offset + PIECE, count)]
            self.wfile.write(piece)
            if self.throttle is not None:
                self.throttle(len(piece))

    def _body_fault(self, fault: Fault, resp: Response) -> bool:
        if resp.status >= 400 or fault.kind not in ("broken", "status_after", "stall", "corrupt"):
            return False
        # uploads apply status-after and stall to the bytes they receive, not to their answer
        return not (fault.kind in ("status_after", "stall") and fault.method == "storage.objects.insert")

    def _send_faulted(self, resp: Response, length: int, fault: Fault) -> int:
        """Send the body as ``fault`` says: cut it, stall in it, or corrupt its first byte."""
        ins = fault.instruction
        write = (
            (lambda a, b: self._send_media(resp.media, b - a, a))
            if resp.media is not None
            else (lambda a, b: self._write_throttled(memoryview(resp.body)[a:b], b - a))
        )
        if ins.kind in ("broken", "status_after"):
            if length < ins.after:  # too short to break: served whole, instruction kept
                write(0, length)
                return length
            write(0, ins.after)
            fault.consume()
            self._abort_connection()
            logger.debug("injected broken stream after %d/%d bytes", ins.after, length)
            return ins.after
        if ins.kind == "stall":
            if length <= ins.after:
                write(0, length)
                return length
            write(0, ins.after)
            fault.consume()
            logger.debug("injected stall of %.1f s after %d bytes", ins.stall_s, ins.after)
            self._pause(ins.stall_s)
            write(ins.after, length)
            return length
        fault.consume()  # corrupt
        if length:
            first = (
                resp.body_bytes()[:1] if resp.media is None else resp.media.reader.read(resp.media.start, 1)
            )
            self.wfile.write(b"B" if first == b"A" else b"A")
            write(1, length)
        return length

    def _send_media(self, media: Media, count: int, offset: int = 0) -> None:
        """Send ``count`` bytes of ``media`` from ``offset``."""
        reader = media.reader
        start = media.start + offset
        if reader.view is not None:
            view = reader.view[start : start + count]
            if self.throttle is None and count == media.length:
                self.wfile.write(view)
            else:
                self._write_throttled(view, count)
            return
        if self.throttle is None and count == media.length:
            if count:
                self.connection.sendfile(reader.file, start, count)
            return
        for off in range(0, count, PIECE):
            n = min(PIECE, count - off)
            self.wfile.write(reader.read(start + off, n))
            if self.throttle is not None:
                self.throttle(n)
