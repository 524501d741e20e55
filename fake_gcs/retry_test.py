"""storage-testbench's Retry Test API: exact, counted faults for named requests.

``POST /retry_test`` with ``{"instructions": {"storage.objects.get": ["return-503",
"return-broken-stream-after-1024K"]}, "transport": "HTTP"}`` answers ``{id, instructions,
completed, transport}``. A request carrying ``x-retry-test-id: <id>`` whose JSON API method
has instructions left consumes the next one; ``completed`` turns true once all are consumed.
Requests without the header are never affected. The per-request ``x-goog-emulator-instructions``
header takes one instruction of the same grammar (plus storage-testbench's older header names)
and applies it to that request only, without accounting.

>>> parse_instruction("return-broken-stream-after-256K").after
262144
>>> parse_instruction("stall-for-3s-after-0K").stall_s
3.0
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import collections
import logging
import re
import threading
import uuid
from dataclasses import dataclass
from typing import Callable

from fake_gcs.errors import GCSError, bad_request
from fake_gcs.request import Request, Response

if TYPE_CHECKING:  # pragma: no cover
    from fake_gcs.app import App

logger = logging.getLogger(__name__)

MAX_TESTS = 10_000
MAX_INSTRUCTIONS = 1_000
MAX_BYTES = 32 << 20  # the memory budget of all Retry Tests together (see instructions_cost)
TEST_OVERHEAD = 1024  # bytes one test holds beyond its instructions (id, dicts, view)
METHOD_OVERHEAD = 640  # ...per method (its queue)
INSTRUCTION_OVERHEAD = 128  # ...per instruction beyond its text (measured: ~100 with tracemalloc)
HEADER_BROKEN_STREAM_AFTER = 1 << 20  # testbench's header form breaks after 1 MiB
RETRY_BROKEN_STREAM_AFTER = 4  # ...and its Retry Test form after a few bytes (4)
LEGACY_STALL_S = 10.0
DOWNLOAD = "storage.objects.download"  # fake_gcs extension: media reads only (python-storage's group name)

_PREFIXES = (
    "storage.bucket_acl.",
    "storage.buckets.",
    "storage.default_object_acl.",
    "storage.folders.",
    "storage.hmacKey.",
    "storage.managedFolders.",
    "storage.notifications.",
    "storage.object_acl.",
    "storage.objects.",
    "storage.serviceaccount.",
)
_METHOD_RE = re.compile(r"^storage\.[A-Za-z_]+\.[A-Za-z]+$")

_STATUS = re.compile(r"^return-([0-9]{3})$")
_RESET = re.compile(r"^return-reset-connection$")
_BROKEN = re.compile(r"^return-broken-stream$")
_STATUS_AFTER = re.compile(r"^return-([0-9]{3})-after-([0-9]{1,9})K$")
_BROKEN_AFTER = re.compile(r"^return-broken-stream-after-([0-9]{1,9})K$")
_STALL_AFTER = re.compile(r"^stall-for-([0-9]{1,6})s-after-([0-9]{1,9})K$")
_UNSUPPORTED = re.compile(
    r"^(return-broken-stream-final-chunk-after-[0-9]+B|redirect-send-token-[a-z\-]+|"
    r"redirect-send-handle-and-token-[a-z\-]+|redirect-expect-token-[a-z\-]+|"
    r"return-unreachable-buckets-.+|return-[0-9]+-if-dp-enforced)$"
)
_RETRY_SUFFIX = re.compile(r"^(.*)/retry-([0-9]{1,6})$")


@dataclass(frozen=True)
class Instruction:
    """One parsed fault.

    kind: ``status`` (answer ``status`` instead of serving), ``reset`` (reset the connection),
    ``broken`` (send ``after`` body bytes, then close), ``status_after`` (uploads: keep the first
    ``after`` bytes, then answer ``status``; downloads: like ``broken``), ``stall`` (pause
    ``stall_s`` seconds once ``after`` bytes went through), ``corrupt`` (flip the first byte).
    """

    text: str
    kind: str
    status: int = 0
    after: int = 0
    stall_s: float = 0.0


def parse_instruction(text: str, header: bool = False) -> Instruction:
    """Parse one instruction; 400 JSON for bad syntax, 501 for one fake_gcs does not implement.

    ``header=True`` also accepts storage-testbench's header-only names (``stall-always``,
    ``stall-at-256KiB``, ``return-corrupted-data``, ``break-after-256K``, ``return-503-after-256K``)
    and gives ``return-broken-stream`` the header meaning (break after 1 MiB).
    """
    if not isinstance(text, str) or len(text) > 200:
        raise bad_request(f"The fault injection request <{str(text)[:100]}> is invalid.")
    if m := _STATUS.match(text):
        code = int(m.group(1))
        if not 400 <= code <= 599:
            raise bad_request(f"The fault injection request <{text}> is invalid: use a 4xx or 5xx code.")
        return Instruction(text, "status", status=code)
    if _RESET.match(text):
        return Instruction(text, "reset")
    if _BROKEN.match(text):
        after = HEADER_BROKEN_STREAM_AFTER if header else RETRY_BROKEN_STREAM_AFTER
        return Instruction(text, "broken", after=after)
    if m := _STATUS_AFTER.match(text):
        code = int(m.group(1))
        if not 400 <= code <= 599:
            raise bad_request(f"The fault injection request <{text}> is invalid: use a 4xx or 5xx code.")
        return Instruction(text, "status_after", status=code, after=int(m.group(2)) << 10)
    if m := _BROKEN_AFTER.match(text):
        return Instruction(text, "broken", after=int(m.group(1)) << 10)
    if m := _STALL_AFTER.match(text):
        return Instruction(text, "stall", after=int(m.group(2)) << 10, stall_s=float(m.group(1)))
    if header:
        legacy = {
            "stall-always": Instruction(text, "stall", after=0, stall_s=LEGACY_STALL_S),
            "stall-at-256KiB": Instruction(text, "stall", after=256 << 10, stall_s=LEGACY_STALL_S),
            "return-corrupted-data": Instruction(text, "corrupt"),
            "break-after-256K": Instruction(text, "broken", after=256 << 10),
        }
        if text in legacy:
            return legacy[text]
    if _UNSUPPORTED.match(text):
        raise GCSError(501, f"The fault injection instruction <{text}> is not implemented by fake_gcs.")
    raise bad_request(f"The fault injection request <{text}> is invalid.")


def parse_header(value: str) -> Instruction | None:
    """The ``x-goog-emulator-instructions`` header; None when a ``/retry-N`` suffix (N >= 3) lifts it."""
    value = value.strip()
    m = _RETRY_SUFFIX.match(value)
    if m:
        if int(m.group(2)) >= 3:  # storage-testbench: attempts 1 and 2 fail, later ones succeed
            return None
        value = m.group(1)
    return parse_instruction(value, header=True)


def supported_methods() -> frozenset[str]:
    """The JSON API methods fake_gcs routes, by the names storage-testbench gives them."""
    from fake_gcs.app import ROUTES  # the routing table names them; imported late (app imports us)

    return frozenset(name for _, methods in ROUTES for _, name in methods.values() if name)


def _validate_method(method) -> None:
    if not isinstance(method, str) or not _METHOD_RE.match(method) or not method.startswith(_PREFIXES):
        raise bad_request(f"The requested method <{str(method)[:100]}> for fault injection is invalid.")
    if method not in supported_methods() and method != DOWNLOAD:
        raise GCSError(501, f"The method <{method}> is not implemented by fake_gcs, so it cannot be faulted.")


class Fault:
    """An instruction picked for one request; :meth:`consume` counts it (once)."""

    def __init__(self, instruction: Instruction, consume: Callable[[], None] | None = None) -> None:
        self.instruction = instruction
        self._consume = consume
        self.consumed = False
        self.method: str | None = None  # the JSON API method of the request it applies to

    @property
    def kind(self) -> str:
        return self.instruction.kind

    def consume(self) -> None:
        if not self.consumed:
            self.consumed = True
            if self._consume is not None:
                self._consume()
            logger.info("fault injected: %s", self.instruction.text)


def instructions_cost(instructions: dict) -> int:
    """Bytes a Retry Test is charged against the budget: its instructions' text plus overheads.

    ``instructions`` maps method names to lists of instruction texts (or parsed Instructions).
    """
    cost = TEST_OVERHEAD
    for method, items in instructions.items():
        cost += METHOD_OVERHEAD + len(method)
        for item in items:
            text = item.text if isinstance(item, Instruction) else item
            cost += INSTRUCTION_OVERHEAD + (len(text) if isinstance(text, str) else 0)
    return cost


class RetryTests:
    """The Retry Test resources of one server (thread-safe), bounded in number and in bytes.

    Each test is charged :func:`instructions_cost` bytes until it is deleted; a test that would
    take the total past ``max_bytes`` is refused (413 when it alone is too big, else 429), before
    its instructions are parsed.
    """

    def __init__(self, max_tests: int = MAX_TESTS, max_bytes: int = MAX_BYTES) -> None:
        self._lock = threading.Lock()
        self._tests: dict[str, dict] = {}
        self.max_tests = max_tests
        self.max_bytes = max_bytes
        self.bytes = 0  # charged by the tests held now

    @staticmethod
    def _view(test: dict) -> dict:
        return {
            "id": test["id"],
            "instructions": {k: [i.text for i in v] for k, v in test["instructions"].items()},
            "completed": test["completed"],
            "transport": test["transport"],
        }

    def create(self, payload: dict) -> dict:
        """Validate and store a Retry Test; its view."""
        instructions = payload.get("instructions")
        if not instructions:
            raise bad_request("instructions is not defined")
        if not isinstance(instructions, dict):
            raise bad_request("instructions must map method names to lists of instructions.")
        transport = payload.get("transport", "HTTP")
        if not isinstance(transport, str) or transport.upper() not in ("HTTP", "GRPC"):
            raise bad_request(f"The requested transport <{str(transport)[:50]}> is not supported.")
        if transport.upper() == "GRPC":
            raise GCSError(501, "fake_gcs has no gRPC transport: create Retry Tests for HTTP.")
        for method, items in instructions.items():
            _validate_method(method)
            if not isinstance(items, list) or len(items) > MAX_INSTRUCTIONS:
                raise bad_request(
                    f"Instructions for <{method}> must be a list of at most {MAX_INSTRUCTIONS}."
                )
        cost = instructions_cost(instructions)
        if cost > self.max_bytes:
            raise GCSError(
                413,
                f"POST /retry_test: this Retry Test needs {cost} bytes, more than the {self.max_bytes} "
                "all Retry Tests may hold: split it into smaller tests.",
            )
        with self._lock:
            self._check_room(cost)  # refuse before parsing anything
        parsed = {
            method: collections.deque(parse_instruction(i) for i in items)
            for method, items in instructions.items()
        }
        test = {"id": uuid.uuid4().hex, "instructions": parsed, "completed": False, "transport": "HTTP"}
        test["cost"] = cost
        with self._lock:
            self._check_room(cost)
            self._tests[test["id"]] = test
            self.bytes += cost
            return self._view(test)

    def _check_room(self, cost: int) -> None:
        """429 unless one more test of ``cost`` bytes fits (call with the lock held)."""
        if len(self._tests) >= self.max_tests:
            raise GCSError(
                429,
                f"POST /retry_test: too many Retry Tests (at most {self.max_tests}): "
                "delete finished ones (DELETE /retry_test/{id}).",
            )
        if self.bytes + cost > self.max_bytes:
            raise GCSError(
                429,
                f"POST /retry_test: Retry Tests hold {self.bytes} of their {self.max_bytes}-byte budget "
                f"and this one needs {cost}: delete finished ones (DELETE /retry_test/{{id}}).",
            )

    def _test(self, test_id: str) -> dict:
        test = self._tests.get(test_id)
        if test is None:
            raise GCSError(404, f"Retry Test {test_id[:100]} does not exist.")
        return test

    def get(self, test_id: str) -> dict:
        with self._lock:
            return self._view(self._test(test_id))

    def delete(self, test_id: str) -> None:
        with self._lock:
            test = self._test(test_id)
            del self._tests[test_id]
            self.bytes -= test["cost"]

    def list(self) -> list[dict]:
        with self._lock:
            return [self._view(t) for t in self._tests.values()]

    def next_fault(self, test_id: str, method: str) -> Fault | None:
        """The next instruction for ``method`` (not yet consumed), or None; 404 for an unknown id."""
        with self._lock:
            queue = self._test(test_id)["instructions"].get(method)
            if not queue:
                return None
            head = queue[0]
        return Fault(head, lambda: self._pop(test_id, method, head))

    def _pop(self, test_id: str, method: str, head: Instruction) -> None:
        with self._lock:
            test = self._tests.get(test_id)
            if test is None:
                return
            queue = test["instructions"].get(method)
            if queue and queue[0] is head:
                queue.popleft()
            if not any(test["instructions"].values()):
                test["completed"] = True


def is_media_read(req: Request) -> bool:
    """A GET of object data (``alt=media``, ``/download/``, XML-style URL), not HEAD or metadata."""
    return req.method == "GET" and (
        req.params.get("alt") == "media" or not req.path.startswith("/storage/v1/")
    )


def fault_for(app: App, req: Request, method: str | None) -> Fault | None:
    """The fault a request asks for through ``x-retry-test-id`` or ``x-goog-emulator-instructions``.

    fake_gcs extensions: the id may come as an ``x-retry-test-id`` query parameter (for clients
    that send one set of headers for many files), and instructions under
    ``storage.objects.download`` apply to media reads only, before ``storage.objects.get`` ones.
    """
    test_id = req.header("x-retry-test-id") or req.params.get("x-retry-test-id")
    if test_id and method is not None:
        fault = None
        if method == "storage.objects.get" and is_media_read(req):
            fault = app.retry_tests.next_fault(test_id.strip(), DOWNLOAD)
        if fault is None:
            fault = app.retry_tests.next_fault(test_id.strip(), method)
        if fault is not None:
            return fault
    header = req.header("x-goog-emulator-instructions") or req.header("x-goog-testbench-instructions")
    if header is not None and method is not None:
        instruction = parse_header(header)
        if instruction is not None:
            return Fault(instruction)
    return None


# ------------------------------------------------------------------ endpoints
def create_test(app: App, req: Request) -> dict:
    """``POST /retry_test``."""
    return app.retry_tests.create(req.read_json(app.limits.max_json_bytes))


def get_test(app: App, req: Request, test_id: str) -> dict:
    """``GET /retry_test/{id}``."""
    return app.retry_tests.get(test_id)


def delete_test(app: App, req: Request, test_id: str) -> Response:
    """``DELETE /retry_test/{id}`` (storage-testbench answers 200 with a line of text)."""
    app.retry_tests.delete(test_id)
    return Response(200, [("Content-Type", "text/plain")], f"Deleted {test_id}".encode())


def list_tests(app: App, req: Request) -> dict:
    """``GET /retry_tests``."""
    return {"retry_test": app.retry_tests.list()}


__all__ = [
    "MAX_BYTES",
    "Fault",
    "Instruction",
    "RetryTests",
    "fault_for",
    "parse_header",
    "parse_instruction",
    "supported_methods",
    "instructions_cost",
]
