"""fake_gcs through the real google-cloud-storage client."""

from __future__ import annotations

import hashlib
import io
import os

import pytest
from google.api_core import exceptions as gexc

from tests.gcs.helpers import BUCKET


def test_buckets(gcs_client, gcs_bucket):
    assert gcs_client.get_bucket(BUCKET).name == BUCKET
    other = gcs_client.create_bucket("other-bucket")
    assert sorted(b.name for b in gcs_client.list_buckets()) == ["other-bucket", BUCKET]
    with pytest.raises(gexc.Conflict):
        gcs_client.create_bucket("other-bucket")
    other.versioning_enabled = True
    other.patch()
    assert gcs_client.get_bucket("other-bucket").versioning_enabled
    other.blob("x").upload_from_string(b"1")
    with pytest.raises(gexc.Conflict):
        other.delete()
    other.delete(force=True)
    with pytest.raises(gexc.NotFound):
        gcs_client.get_bucket("other-bucket")


def test_upload_download_with_checksums(gcs_bucket):
    data = os.urandom(100_003)
    blob = gcs_bucket.blob("dir/obj.bin")
    blob.upload_from_string(data, checksum="md5")  # multipart; the client checks our md5Hash
    assert blob.size == len(data) and blob.md5_hash and blob.crc32c
    fresh = gcs_bucket.get_blob("dir/obj.bin")
    assert fresh.generation == blob.generation and fresh.metageneration == 1
    assert fresh.download_as_bytes(checksum="crc32c") == data  # validates x-goog-hash
    assert fresh.download_as_bytes(checksum="md5") == data
    for start, end in [(0, 0), (1, 1), (77, 50_001), (99_999, 100_002), (33_333, None)]:
        want = data[start:] if end is None else data[start : end + 1]  # end is inclusive here
        assert fresh.download_as_bytes(start=start, end=end) == want


def test_resumable_upload_over_100mb_and_odd_range_reads(gcs_bucket, gcsfs_fs):
    """The heavy one: a 100 MiB + odd-size resumable upload in 16 MiB chunks, read back in pieces."""
    size = 100 * 2**20 + 12_345
    data = os.urandom(size)
    blob = gcs_bucket.blob("big/object.bin", chunk_size=16 * 2**20)
    blob.upload_from_file(io.BytesIO(data), size=size, checksum="crc32c")
    assert blob.size == size
    assert blob.md5_hash == gcs_bucket.get_blob("big/object.bin").md5_hash
    path = f"{BUCKET}/big/object.bin"
    assert gcsfs_fs.info(path)["size"] == size
    import base64

    assert base64.b64decode(blob.md5_hash) == hashlib.md5(data).digest()
    for start in (1, 4095, 8 * 2**20 + 3, 64 * 2**20 - 1, size - 7):
        end = min(start + 3 * 2**20 + 1, size)
        assert gcsfs_fs.cat_file(path, start=start, end=end) == data[start:end]
    assert gcs_bucket.blob("big/object.bin").download_as_bytes(start=size - 10) == data[-10:]


def test_metadata_patch_update_and_reload(gcs_bucket):
    blob = gcs_bucket.blob("m.txt")
    blob.upload_from_string("text", content_type="text/plain")
    blob.metadata = {"a": "1", "b": "2"}
    blob.patch()
    assert blob.metageneration == 2 and blob.metadata == {"a": "1", "b": "2"}
    blob.metadata = {"a": None}
    blob.patch()
    assert gcs_bucket.get_blob("m.txt").metadata == {"b": "2"}
    blob.reload()
    blob.cache_control = "no-cache"
    blob.update()
    again = gcs_bucket.get_blob("m.txt")
    assert again.cache_control == "no-cache" and again.content_type == "text/plain"
    assert again.metageneration == 4


def test_copy_rewrite_compose(gcs_client, gcs_bucket):
    gcs_bucket.blob("a").upload_from_string(b"aaa")
    gcs_bucket.blob("b").upload_from_string(b"bb")
    copied = gcs_bucket.copy_blob(gcs_bucket.blob("a"), gcs_bucket, "a-copy")
    assert copied.download_as_bytes() == b"aaa"
    dest = gcs_bucket.blob("a-rewritten")
    token, done, total = dest.rewrite(gcs_bucket.blob("a"))
    assert token is None and done == total == 3
    composed = gcs_bucket.blob("ab")
    composed.compose([gcs_bucket.blob("a"), gcs_bucket.blob("b")])
    assert composed.download_as_bytes() == b"aaabb" and composed.component_count == 2


def test_listing(gcs_client, gcs_bucket):
    for name in ["x/1", "x/2", "x/y/3", "z/", "z/4", "top"]:
        gcs_bucket.blob(name).upload_from_string(name)
    it = gcs_client.list_blobs(BUCKET, delimiter="/")
    assert [b.name for b in it] == ["top"] and it.prefixes == {"x/", "z/"}
    it = gcs_client.list_blobs(BUCKET, prefix="z/", delimiter="/", include_trailing_delimiter=True)
    assert [b.name for b in it] == ["z/", "z/4"]
    assert [b.name for b in gcs_client.list_blobs(BUCKET, start_offset="x/2", end_offset="z/4")] == [
        "x/2",
        "x/y/3",
        "z/",
    ]
    paged = gcs_client.list_blobs(BUCKET, page_size=2)
    assert [b.name for b in paged] == ["top", "x/1", "x/2", "x/y/3", "z/", "z/4"]
    assert paged.num_results == 6
    assert [b.name for b in gcs_client.list_blobs(BUCKET, max_results=3)] == ["top", "x/1", "x/2"]
    assert [b.name for b in gcs_client.list_blobs(BUCKET, match_glob="x/*")] == ["x/1", "x/2"]
    names_only = list(gcs_client.list_blobs(BUCKET, prefix="x/", fields="items(name),nextPageToken"))
    assert [b.name for b in names_only] == ["x/1", "x/2", "x/y/3"] and names_only[0].size is None


def test_preconditions_and_generations(gcs_client):
    bucket = gcs_client.create_bucket("versions-bucket")
    bucket.versioning_enabled = True
    bucket.patch()
    blob = bucket.blob("o")
    blob.upload_from_string(b"one", if_generation_match=0)
    g1 = blob.generation
    with pytest.raises(gexc.PreconditionFailed):
        bucket.blob("o").upload_from_string(b"two", if_generation_match=0)
    bucket.blob("o").upload_from_string(b"two", if_generation_match=g1)
    assert bucket.blob("o", generation=g1).download_as_bytes() == b"one"
    assert bucket.blob("o").download_as_bytes() == b"two"
    versions = list(gcs_client.list_blobs(bucket, versions=True))
    assert [v.generation for v in versions][0] == g1 and len(versions) == 2
    with pytest.raises(gexc.PreconditionFailed):
        bucket.blob("o").delete(if_generation_match=g1)
    with pytest.raises(gexc.PreconditionFailed):
        bucket.get_blob("o", if_metageneration_match=5)
    bucket.blob("o", generation=g1).delete()
    assert [v.generation for v in gcs_client.list_blobs(bucket, versions=True)] != [g1]
    assert not bucket.blob("missing").exists()
    with pytest.raises(gexc.NotFound):
        bucket.blob("missing").download_as_bytes()


def test_bad_checksum_is_rejected_and_nothing_is_created(gcs_bucket):
    blob = gcs_bucket.blob("bad")
    blob.md5_hash = "1B2M2Y8AsgTpgAmY7PhCfg=="  # the md5 of b"", not of the data
    with pytest.raises(gexc.BadRequest):
        blob.upload_from_string(b"not empty")
    assert not gcs_bucket.blob("bad").exists()


def test_batch(gcs_client, gcs_bucket):
    for i in range(5):
        gcs_bucket.blob(f"b{i}").upload_from_string(str(i))
    with gcs_client.batch():
        for i in range(3):
            gcs_bucket.blob(f"b{i}").delete()
        blob = gcs_bucket.blob("b4")
        blob.metadata = {"batched": "yes"}
        blob.patch()
    assert [b.name for b in gcs_client.list_blobs(BUCKET)] == ["b3", "b4"]
    assert gcs_bucket.get_blob("b4").metadata == {"batched": "yes"}
