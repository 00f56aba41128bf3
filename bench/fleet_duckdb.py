#!/usr/bin/env python3
"""Reads `sandglass runs export --parquet DIR` with DuckDB: checks the row counts against the
catalog, answers "p99 by host and kernel over the last week" from both files, and checks the
exact p99 that SQL computes from the histograms against `sandglass report --merge` of the
same runs.

    sandglass runs export --parquet /tmp/fleet
    python3 bench/fleet_duckdb.py /tmp/fleet [--bin target/release/sandglass]

Needs the duckdb Python package (pip install duckdb). Exit code 1 when a check fails."""
import argparse
import json
import pathlib
import subprocess
import sys

import duckdb

# p99 per host and kernel over the last week, from the runs' own figures (each run's worst
# CPU, as `sandglass runs` shows it): how many runs, the median and the worst of their p99.
BY_RUN = """
select host, kernel, count(*) as runs, sum(count) as releases,
       median(p99_ns) / 1e3 as median_p99_us, max(p99_ns) / 1e3 as worst_p99_us,
       max(max_ns) / 1e3 as max_us, sum(missed) as missed
from read_parquet('{dir}/runs.parquet')
where kind = 'timer' and started_at >= now() - interval 7 day
group by host, kernel
order by host, kernel
"""

# The exact p99 of every release of the week per host and kernel: the runs' histograms added
# bucket by bucket (HDR histograms add without loss), then the nearest rank.
POOLED = """
with buckets as (
    select host, kernel, value_ns, sum(count) as n
    from read_parquet('{dir}/histograms.parquet')
    where kind = 'timer' and started_at >= now() - interval 7 day
    group by host, kernel, value_ns
), ranked as (
    select *, sum(n) over (partition by host, kernel order by value_ns) as below,
              sum(n) over (partition by host, kernel) as total
    from buckets
)
select host, kernel, max(total) as releases,
       min(value_ns) filter (where below >= ceil(0.99 * total)) / 1e3 as p99_us,
       min(value_ns) filter (where below >= ceil(0.999 * total)) / 1e3 as p99_9_us,
       max(value_ns) / 1e3 as max_us
from ranked
group by host, kernel
order by host, kernel
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--bin", default="target/release/sandglass")
    a = ap.parse_args()
    d = pathlib.Path(a.dir)
    db = duckdb.connect()
    ok = True

    listed = json.loads(
        subprocess.run([a.bin, "runs", "--json"], check=True, capture_output=True, text=True).stdout
    )["runs"]
    n = db.execute(f"select count(*) from read_parquet('{d}/runs.parquet')").fetchall()[0][0]
    print(f"runs.parquet: {n} rows; the catalog lists {len(listed)} runs")
    ok &= n == len(listed)

    print("\np99 by host and kernel over the last week, from each run's figures:")
    print(db.sql(BY_RUN.format(dir=d)))
    print("The exact p99 of every release of the week, from the histograms:")
    pooled = db.sql(POOLED.format(dir=d))
    print(pooled)

    # The same runs merged by sandglass: the SQL p99 must be its p99.
    for host, kernel, releases, p99_us, _, _ in pooled.fetchall():
        ids = [
            r[0]
            for r in db.execute(
                f"select id from read_parquet('{d}/runs.parquet') where kind = 'timer' "
                "and host = ? and kernel = ? and started_at >= now() - interval 7 day",
                [host, kernel],
            ).fetchall()
        ]
        # Runs whose histograms were left out (damaged) are not in the SQL figure either.
        present = {
            r[0]
            for r in db.execute(
                f"select distinct run_id from read_parquet('{d}/histograms.parquet')"
            ).fetchall()
        }
        ids = [i for i in ids if i in present]
        merged = json.loads(
            subprocess.run(
                [a.bin, "report", "--merge", *ids, "--json"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )["merged"]
        same = merged["count"] == releases and merged["p99"] == round(p99_us * 1e3)
        ok &= same
        print(
            f"{host} {kernel}: SQL {releases} releases, p99 {p99_us * 1e3:.0f} ns; "
            f"report --merge of {len(ids)} runs: {merged['count']} releases, p99 {merged['p99']} ns"
            f" {'(same)' if same else '(DIFFERENT)'}"
        )
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
