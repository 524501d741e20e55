"""GCS-shaped errors: an exception carrying the HTTP status, rendered as GCS's JSON error body."""

from __future__ import annotations

import json
import logging

logger = logging.getLogger(__name__)

REASONS = {
    304: "notModified",
    400: "invalid",
    401: "required",
    403: "forbidden",
    404: "notFound",
    405: "methodNotAllowed",
    409: "conflict",
    411: "lengthRequired",
    412: "conditionNotMet",
    413: "uploadTooLarge",
    416: "requestedRangeNotSatisfiable",
    429: "rateLimitExceeded",
    499: "clientClosedRequest",
    500: "backendError",
    501: "notImplemented",
    503: "backendError",
}


class GCSError(Exception):
    """An error answered to the client with ``status`` and GCS's JSON error shape."""

    def __init__(self, status: int, message: str, reason: str | None = None, headers=None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason or REASONS.get(status, "unknown")
        self.headers = list(headers or [])

    def to_json(self) -> bytes:
        """The body GCS sends: ``{"error": {"code", "message", "errors": [...]}}``."""
        err = {"domain": "global", "reason": self.reason, "message": self.message}
        body = {"error": {"code": self.status, "message": self.message, "errors": [err]}}
        return json.dumps(body).encode()


def bad_request(message: str) -> GCSError:
    """400 with reason ``invalid``."""
    return GCSError(400, message, "invalid")


def no_such_bucket(bucket: str) -> GCSError:
    """404 for a missing bucket, worded as GCS words it."""
    return GCSError(404, f"The specified bucket does not exist: {bucket}", "notFound")


def no_such_object(bucket: str, name: str, generation: int | None = None) -> GCSError:
    """404 for a missing object (gcsfs looks for the words "No such object")."""
    suffix = f"#{generation}" if generation else ""
    return GCSError(404, f"No such object: {bucket}/{name}{suffix}", "notFound")


def precondition_failed() -> GCSError:
    """412 for a failed ``if*Match`` precondition."""
    return GCSError(412, "At least one of the pre-conditions you specified did not hold.")


def not_modified() -> GCSError:
    """304 for a failed ``if*NotMatch`` precondition on a read, as GCS answers."""
    return GCSError(304, "Not Modified")
