"""The JSON API at the HTTP level: shapes, status codes, ranges, resumable sessions, listing."""

from __future__ import annotations

import base64
import hashlib
import json
import struct

import google_crc32c
import pytest

from tests.gcs.helpers import BUCKET, object_path, upload

DATA = bytes(range(256)) * 40  # 10240 bytes


def b64crc(data: bytes) -> str:
    return base64.b64encode(struct.pack(">I", google_crc32c.value(data))).decode()


def b64md5(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def assert_error(status, body, code, reason=None):
    assert status == code
    err = json.loads(body)["error"] if isinstance(body, (bytes, str)) else body["error"]
    assert err["code"] == code and err["message"]
    if reason:
        assert err["errors"][0]["reason"] == reason


def test_object_resource_is_shaped_like_gcs(raw):
    res = upload(raw, "dir/a.bin", DATA)
    assert res["kind"] == "storage#object"
    assert res["name"] == "dir/a.bin" and res["bucket"] == BUCKET
    assert res["size"] == str(len(DATA))
    assert res["crc32c"] == b64crc(DATA) and res["md5Hash"] == b64md5(DATA)
    assert res["generation"].isdigit() and res["metageneration"] == "1"
    assert res["timeCreated"].endswith("Z") and res["updated"].endswith("Z") and res["etag"]
    status, _, got = raw.json("GET", object_path("dir/a.bin"))
    assert status == 200 and got == res


def test_download_ranges(raw):
    upload(raw, "r.bin", DATA)
    path = object_path("r.bin") + "?alt=media"
    status, h, body = raw("GET", path)
    assert status == 200 and body == DATA and h["content-length"] == str(len(DATA))
    assert f"crc32c={b64crc(DATA)}" in h["x-goog-hash"]
    cases = {
        "bytes=7-1000": (7, 1001),
        "bytes=10000-": (10000, len(DATA)),
        "bytes=-13": (len(DATA) - 13, len(DATA)),
        "bytes=10239-99999": (10239, 10240),
        "bytes=-99999": (0, len(DATA)),
    }
    for rng, (a, b) in cases.items():
        status, h, body = raw("GET", path, headers={"Range": rng})
        assert status == 206, rng
        assert body == DATA[a:b], rng
        assert h["content-range"] == f"bytes {a}-{b - 1}/{len(DATA)}"
    for rng in ("bytes=10240-", "bytes=99999-100000", "bytes=-0"):
        status, h, body = raw("GET", path, headers={"Range": rng})
        assert_error(status, body, 416, "requestedRangeNotSatisfiable")
        assert h["content-range"] == f"bytes */{len(DATA)}"
    status, _, body = raw("GET", path, headers={"Range": "pages=1-2"})
    assert_error(status, body, 400)
    # the /download/ path and generation= give the same bytes
    gen = json.loads(raw("GET", object_path("r.bin"))[2])["generation"]
    status, _, body = raw(
        "GET",
        f"/download/storage/v1/b/{BUCKET}/o/r.bin?alt=media&generation={gen}",
        headers={"Range": "bytes=3-5"},
    )
    assert status == 206 and body == DATA[3:6]


def test_head_requests(raw):
    upload(raw, "h.bin", DATA)
    status, h, body = raw("HEAD", object_path("h.bin") + "?alt=media")
    assert status == 200 and body == b"" and h["content-length"] == str(len(DATA))
    status, h, body = raw("HEAD", object_path("missing"))
    assert status == 404 and body == b""
    status, _, body = raw("GET", object_path("h.bin") + "?alt=media", headers={"Range": "bytes=0-3"})
    assert body == DATA[:4]  # the connection is still in sync after HEADs


def test_multipart_upload_crlf_and_lf(raw):
    for nl in (b"\r\n", b"\n"):
        meta = json.dumps({"name": "mp.txt", "metadata": {"k": "v"}, "contentType": "text/plain"}).encode()
        body = nl.join(
            [
                b"--XX",
                b"Content-Type: application/json",
                b"",
                meta,
                b"--XX",
                b"Content-Type: text/plain",
                b"",
                DATA,
                b"--XX--",
            ]
        )
        status, _, res = raw(
            "POST",
            f"/upload/storage/v1/b/{BUCKET}/o?uploadType=multipart",
            body,
            {"Content-Type": "multipart/related; boundary=XX"},
        )
        res = json.loads(res)
        assert status == 200 and res["size"] == str(len(DATA)) and res["metadata"] == {"k": "v"}
        assert res["contentType"] == "text/plain"
        assert raw("GET", object_path("mp.txt") + "?alt=media")[2] == DATA


@pytest.mark.parametrize("how", ["media-crc", "media-md5", "multipart-md5", "multipart-crc", "resumable"])
def test_checksum_mismatch_rejects_upload(raw, how):
    wrong_crc, wrong_md5 = b64crc(b"other"), b64md5(b"other")
    if how.startswith("media"):
        header = f"crc32c={wrong_crc}" if how == "media-crc" else f"md5={wrong_md5}"
        status, _, body = raw(
            "POST", f"/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name=c", DATA, {"x-goog-hash": header}
        )
    elif how.startswith("multipart"):
        field = {"md5Hash": wrong_md5} if how == "multipart-md5" else {"crc32c": wrong_crc}
        meta = json.dumps({"name": "c", **field}).encode()
        payload = b"\r\n".join(
            [
                b"--B",
                b"Content-Type: application/json",
                b"",
                meta,
                b"--B",
                b"Content-Type: application/octet-stream",
                b"",
                DATA,
                b"--B--",
            ]
        )
        status, _, body = raw(
            "POST",
            f"/upload/storage/v1/b/{BUCKET}/o?uploadType=multipart",
            payload,
            {"Content-Type": "multipart/related; boundary=B"},
        )
    else:
        _, h, _ = raw.json(
            "POST", f"/upload/storage/v1/b/{BUCKET}/o?uploadType=resumable&name=c", {"crc32c": wrong_crc}
        )
        status, _, body = raw(
            "PUT",
            h["location"].split("127.0.0.1", 1)[1].split("/", 1)[1].join(["/", ""]),
            DATA,
            {"Content-Range": f"bytes 0-{len(DATA) - 1}/{len(DATA)}"},
        )
    assert_error(status, body, 400, "invalid")
    assert raw("GET", object_path("c"))[0] == 404
    # a correct hash is accepted
    upload_status = raw(
        "POST",
        f"/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name=c",
        DATA,
        {"x-goog-hash": f"crc32c={b64crc(DATA)},md5={b64md5(DATA)}"},
    )[0]
    assert upload_status == 200


def _session_path(location: str) -> str:
    return "/" + location.split("://", 1)[1].split("/", 1)[1]


def test_resumable_session_protocol(raw):
    chunk = 256 * 1024
    data = bytes(i % 251 for i in range(2 * chunk + 1000))
    status, h, _ = raw.json(
        "POST",
        f"/upload/storage/v1/b/{BUCKET}/o?uploadType=resumable",
        {"name": "res.bin", "metadata": {"x": "1"}},
        {"X-Upload-Content-Type": "text/x"},
    )
    assert status == 200
    session = _session_path(h["location"])
    status, h, _ = raw("PUT", session, b"", {"Content-Range": "bytes */*"})
    assert status == 308 and "range" not in h  # nothing received yet
    status, h, _ = raw("PUT", session, data[:chunk], {"Content-Range": f"bytes 0-{chunk - 1}/*"})
    assert status == 308 and h["range"] == f"bytes=0-{chunk - 1}"
    # a resent (overlapping) chunk is accepted; only the new bytes count
    status, h, _ = raw("POST", session, data[: 2 * chunk], {"Content-Range": f"bytes 0-{2 * chunk - 1}/*"})
    assert status == 308 and h["range"] == f"bytes=0-{2 * chunk - 1}"
    status, h, _ = raw("PUT", session, b"", {"Content-Range": f"bytes */{len(data)}"})
    assert status == 308 and h["range"] == f"bytes=0-{2 * chunk - 1}"
    status, _, body = raw(
        "PUT",
        session,
        data[2 * chunk + 10 :],
        {"Content-Range": f"bytes {2 * chunk + 10}-{len(data) - 1}/{len(data)}"},
    )
    assert_error(status, body, 400)  # a gap
    status, _, body = raw(
        "PUT", session, data[2 * chunk :], {"Content-Range": f"bytes {2 * chunk}-{len(data) - 1}/{len(data)}"}
    )
    res = json.loads(body)
    assert status == 200 and res["size"] == str(len(data)) and res["contentType"] == "text/x"
    assert res["metadata"] == {"x": "1"} and res["md5Hash"] == b64md5(data)
    assert raw("GET", object_path("res.bin") + "?alt=media")[2] == data
    status, _, again = raw("PUT", session, b"", {"Content-Range": f"bytes */{len(data)}"})
    assert status == 200 and json.loads(again)["generation"] == res["generation"]


def test_resumable_cancel(raw):
    _, h, _ = raw.json("POST", f"/upload/storage/v1/b/{BUCKET}/o?uploadType=resumable&name=gone", {})
    session = _session_path(h["location"])
    assert raw("PUT", session, b"abc", {"Content-Range": "bytes 0-2/*"})[0] == 308
    assert raw("DELETE", session)[0] == 499
    assert raw("PUT", session, b"", {"Content-Range": "bytes */3"})[0] == 404
    assert raw("GET", object_path("gone"))[0] == 404


def test_preconditions(raw):
    gen = upload(raw, "p", b"one")["generation"]
    status, _, body = raw(
        "POST", f"/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name=p&ifGenerationMatch=0", b"x"
    )
    assert_error(status, body, 412, "conditionNotMet")
    status, _, body = raw(
        "POST", f"/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name=new&ifGenerationMatch=0", b"x"
    )
    assert status == 200
    assert raw("GET", object_path("p") + "?ifGenerationMatch=123")[0] == 412
    assert raw("GET", object_path("p") + f"?ifGenerationMatch={gen}")[0] == 200
    assert raw("GET", object_path("p") + f"?ifGenerationNotMatch={gen}")[0] == 304  # as GCS answers reads
    status, _, body = raw.json(
        "PATCH", object_path("p") + "?ifMetagenerationMatch=7", {"metadata": {"a": "b"}}
    )
    assert_error(status, body, 412)
    status, _, body = raw.json(
        "PATCH", object_path("p") + "?ifMetagenerationMatch=1", {"metadata": {"a": "b"}}
    )
    assert status == 200 and body["metageneration"] == "2"
    assert raw("DELETE", object_path("p") + "?ifMetagenerationNotMatch=2")[0] == 412
    assert raw("DELETE", object_path("p") + "?ifGenerationMatch=1")[0] == 412
    gen2 = upload(raw, "p", b"two", ifGenerationMatch=gen)["generation"]
    assert int(gen2) > int(gen)
    assert raw("DELETE", object_path("p") + f"?ifGenerationMatch={gen2}")[0] == 204


def test_errors_are_gcs_json(raw):
    status, _, body = raw("GET", "/storage/v1/b/nope/o/x")
    assert_error(status, body, 404, "notFound")
    status, _, body = raw("GET", object_path("nope"))
    assert_error(status, body, 404)
    assert "No such object" in json.loads(body)["error"]["message"]
    status, _, body = raw("GET", "/no/such/api/path/at/all")
    assert status == 404 and json.loads(body)["error"]["code"] == 404
    status, _, body = raw(
        "POST", "/storage/v1/b?project=p", b"{not json", {"Content-Type": "application/json"}
    )
    assert_error(status, body, 400)
    status, _, body = raw("POST", "/storage/v1/b?project=p", b"[1, 2]", {"Content-Type": "application/json"})
    assert_error(status, body, 400)
    status, _, body = raw.json("POST", "/storage/v1/b?project=p", {"name": BUCKET})
    assert_error(status, body, 409, "conflict")
    status, _, body = raw.json("POST", "/storage/v1/b?project=p", {"name": "Bad Name!"})
    assert_error(status, body, 400)
    status, _, body = raw("OPTIONS", "/storage/v1/b")
    assert status >= 400 and json.loads(body)["error"]["code"] == status


def test_bucket_lifecycle(raw):
    status, _, b = raw.json("POST", "/storage/v1/b?project=p", {"name": "second", "labels": {"a": "1"}})
    assert status == 200 and b["name"] == "second" and b["labels"] == {"a": "1"}
    names = [x["name"] for x in raw.json("GET", "/storage/v1/b?project=p")[2]["items"]]
    assert names == sorted([BUCKET, "second"])
    status, _, b2 = raw.json("PATCH", "/storage/v1/b/second", {"versioning": {"enabled": True}})
    assert status == 200 and b2["versioning"] == {"enabled": True} and b2["metageneration"] == "2"
    assert raw.json("GET", "/storage/v1/b/second")[2]["versioning"]["enabled"] is True
    upload(raw, "x", b"1", bucket="second")
    status, _, body = raw("DELETE", "/storage/v1/b/second")
    assert_error(status, body, 409)
    assert raw("DELETE", object_path("x", "second"))[0] == 204
    assert raw("DELETE", "/storage/v1/b/second")[0] == 204
    assert raw("GET", "/storage/v1/b/second")[0] == 404


def test_patch_and_update(raw):
    upload(raw, "m", b"data", contentEncoding="identity")
    _, _, res = raw.json(
        "PATCH", object_path("m"), {"metadata": {"a": "1", "b": "2"}, "contentType": "text/plain"}
    )
    assert res["metadata"] == {"a": "1", "b": "2"} and res["contentType"] == "text/plain"
    _, _, res = raw.json("PATCH", object_path("m"), {"metadata": {"a": None, "c": "3"}})
    assert res["metadata"] == {"b": "2", "c": "3"} and res["contentType"] == "text/plain"
    _, _, res = raw.json("PUT", object_path("m"), {"metadata": {"z": "9"}})  # update replaces
    assert res["metadata"] == {"z": "9"} and res["contentType"] == "application/octet-stream"
    assert res["metageneration"] == "4" and res["size"] == "4"


def test_copy_rewrite_move_compose(raw):
    upload(raw, "src", DATA)
    _, _, res = raw.json("POST", f"/storage/v1/b/{BUCKET}/o/src/copyTo/b/{BUCKET}/o/dst%2Fcopy", {})
    assert res["name"] == "dst/copy" and res["crc32c"] == b64crc(DATA)
    big = bytes(3 << 20) + b"tail"
    upload(raw, "big", big)
    path = f"/storage/v1/b/{BUCKET}/o/big/rewriteTo/b/{BUCKET}/o/big2?maxBytesRewrittenPerCall=1048576"
    _, _, out = raw.json("POST", path, {})
    calls = 1
    while not out["done"]:
        assert int(out["totalBytesRewritten"]) < len(big)
        _, _, out = raw.json("POST", path + "&rewriteToken=" + out["rewriteToken"], {})
        calls += 1
    assert calls == 4 and out["resource"]["size"] == str(len(big))
    assert raw("GET", object_path("big2") + "?alt=media")[2] == big
    _, _, moved = raw.json("POST", f"/storage/v1/b/{BUCKET}/o/big2/moveTo/o/moved")
    assert moved["name"] == "moved" and raw("GET", object_path("big2"))[0] == 404
    upload(raw, "p1", b"hello ")
    upload(raw, "p2", b"world")
    _, _, comp = raw.json(
        "POST",
        object_path("joined") + "/compose",
        {
            "sourceObjects": [{"name": "p1"}, {"name": "p2"}, {"name": "p1"}],
            "destination": {"contentType": "text/plain"},
        },
    )
    assert comp["componentCount"] == 3 and comp["crc32c"] == b64crc(b"hello worldhello ")
    assert "md5Hash" not in comp and comp["contentType"] == "text/plain"
    assert raw("GET", object_path("joined") + "?alt=media")[2] == b"hello worldhello "
    status, _, body = raw.json(
        "POST",
        object_path("j2") + "/compose",
        {"sourceObjects": [{"name": "p1", "objectPreconditions": {"ifGenerationMatch": 1}}]},
    )
    assert_error(status, body, 412)


def _list_all(raw, query: str) -> tuple[list, list, int]:
    items, prefixes, pages, token = [], [], 0, None
    while True:
        q = query + (f"&pageToken={token}" if token else "")
        _, _, page = raw.json("GET", f"/storage/v1/b/{BUCKET}/o?{q}")
        pages += 1
        items += [i["name"] for i in page.get("items", [])]
        prefixes += page.get("prefixes", [])
        token = page.get("nextPageToken")
        if not token:
            return items, prefixes, pages


def test_listing(raw):
    names = ["a/1", "a/2", "a/b/3", "a/c/", "a/c/4", "b", "c/5", "c/6/7", "d"]
    for n in names:
        upload(raw, n, b"x")
    assert _list_all(raw, "maxResults=2")[0] == sorted(names)
    assert _list_all(raw, "maxResults=2")[2] == 5
    items, prefixes, _ = _list_all(raw, "delimiter=/&maxResults=1")
    assert items == ["b", "d"] and prefixes == ["a/", "c/"]
    items, prefixes, _ = _list_all(raw, "prefix=a/&delimiter=/")
    assert items == ["a/1", "a/2"] and prefixes == ["a/b/", "a/c/"]
    items, prefixes, _ = _list_all(raw, "prefix=a/&delimiter=/&includeTrailingDelimiter=true&maxResults=1")
    assert items == ["a/1", "a/2", "a/c/"] and prefixes == ["a/b/", "a/c/"]
    assert _list_all(raw, "startOffset=a/c&endOffset=c/6")[0] == ["a/c/", "a/c/4", "b", "c/5"]
    assert _list_all(raw, "matchGlob=**/[0-9]")[0] == ["a/1", "a/2", "a/b/3", "a/c/4", "c/5", "c/6/7"]
    _, _, page = raw.json("GET", f"/storage/v1/b/{BUCKET}/o?prefix=c/&fields=items(name,size),nextPageToken")
    assert page == {"items": [{"name": "c/5", "size": "1"}, {"name": "c/6/7", "size": "1"}]}


def test_versioning(raw):
    raw.json("POST", "/storage/v1/b?project=p", {"name": "vbucket", "versioning": {"enabled": True}})
    g1 = upload(raw, "o", b"v1", bucket="vbucket")["generation"]
    g2 = upload(raw, "o", b"v2", bucket="vbucket")["generation"]
    assert int(g2) > int(g1)
    _, _, page = raw.json("GET", "/storage/v1/b/vbucket/o?versions=true")
    assert [(i["name"], i["generation"]) for i in page["items"]] == [("o", g1), ("o", g2)]
    assert "timeDeleted" in page["items"][0] and "timeDeleted" not in page["items"][1]
    assert [i["generation"] for i in raw.json("GET", "/storage/v1/b/vbucket/o")[2]["items"]] == [g2]
    assert raw("GET", object_path("o", "vbucket") + f"?alt=media&generation={g1}")[2] == b"v1"
    assert raw.json("GET", object_path("o", "vbucket") + f"?generation={g1}")[2]["generation"] == g1
    assert raw("DELETE", object_path("o", "vbucket"))[0] == 204  # live -> noncurrent
    assert raw("GET", object_path("o", "vbucket"))[0] == 404
    assert raw("GET", object_path("o", "vbucket") + f"?alt=media&generation={g2}")[2] == b"v2"
    assert raw("DELETE", object_path("o", "vbucket") + f"?generation={g1}")[0] == 204
    _, _, page = raw.json("GET", "/storage/v1/b/vbucket/o?versions=true")
    assert [i["generation"] for i in page["items"]] == [g2]
    # a plain bucket keeps no old generations
    upload(raw, "q", b"1")
    g = upload(raw, "q", b"2")["generation"]
    assert [
        i["generation"] for i in raw.json("GET", f"/storage/v1/b/{BUCKET}/o?versions=true")[2]["items"]
    ] == [g]


def test_batch_endpoint_gcsfs_style(raw):
    for n in ("x1", "x2"):
        upload(raw, n, b"z")
    parts = []
    for i, name in enumerate(["x1", "x2", "missing"]):
        parts.append(
            f"--===B==\nContent-Type: application/http\nContent-ID: <id+{i}>\n\n"
            f"DELETE /storage/v1/b/{BUCKET}/o/{name} HTTP/1.1\nContent-Type: application/json\n"
            "accept: application/json\ncontent-length: 0\n"
        )
    body = "\n" + "".join(parts) + "\n--===B==--"
    status, h, out = raw(
        "POST", "/batch/storage/v1", body.encode(), {"Content-Type": 'multipart/mixed; boundary="===B=="'}
    )
    assert status == 200
    boundary = h["content-type"].split("=", 1)[1]
    responses = out.decode().split(boundary)[1:-1]
    codes = [int(r.split("HTTP/1.1 ", 1)[1][:3]) for r in responses]
    assert codes == [204, 204, 404]
    assert "<response-id+0>" in responses[0]
    assert raw("GET", object_path("x1"))[0] == 404


def test_keep_alive_survives_errors(raw):
    """Many requests, errors included, over one connection: answers stay in order."""
    for i in range(50):
        upload(raw, f"k{i}", str(i).encode())
        assert raw("GET", "/storage/v1/b/zz/o")[0] == 404
        assert raw("POST", f"/upload/storage/v1/b/{BUCKET}/o?uploadType=media", b"no name")[0] == 400
        assert raw("GET", object_path(f"k{i}") + "?alt=media")[2] == str(i).encode()


def test_chunked_request_bodies(raw):
    """Transfer-Encoding: chunked works for media uploads and resumable chunks."""

    def chunked(data: bytes):
        yield data[:1000]
        yield data[1000:]

    # http.client sends an iterable body without a length as Transfer-Encoding: chunked
    status, _, body = raw("POST", f"/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name=ch", chunked(DATA))
    assert status == 200 and json.loads(body)["size"] == str(len(DATA))
    _, h, _ = raw.json("POST", f"/upload/storage/v1/b/{BUCKET}/o?uploadType=resumable&name=ch2", {})
    status, _, body = raw(
        "PUT",
        _session_path(h["location"]),
        chunked(DATA),
        {"Content-Range": f"bytes 0-{len(DATA) - 1}/{len(DATA)}"},
    )
    assert status == 200 and json.loads(body)["md5Hash"] == b64md5(DATA)
    assert raw("GET", object_path("ch2") + "?alt=media")[2] == DATA
