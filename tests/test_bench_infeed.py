"""`tpudata bench infeed` end to end at a tiny size (local disk and a fake GCS server process)."""

from __future__ import annotations

import json

from tpudata.cli import main


def test_bench_infeed_small(tmp_path, capsys):
    out = tmp_path / "results.json"
    rc = main(["bench", "infeed", "--dir", str(tmp_path / "w"), "--shards", "2", "--shard-mb", "0.6",
               "--parallel", "1", "2", "--steps", "3", "--batch-size", "16", "--step-ms", "1",
               "--latency-ms", "5", "--bandwidth-mbps", "50", "--no-tf", "--json", str(out),
               "--plot", str(tmp_path / "p.png")])
    assert rc == 0
    text = capsys.readouterr().out
    assert "num_parallel_reads | local rec/s" in text
    assert "preparing the workload: writing 2 shard(s)" in text  # progress before the runs
    results = json.loads(out.read_text())
    for source in ("local", "gcs"):
        assert [r["parallel"] for r in results[source]] == [1, 2]
        for r in results[source]:
            assert r["steps"] == 3 and r["records_per_s"] > 0 and 0 <= r["input_bound_pct"] <= 100
