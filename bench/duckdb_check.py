#!/usr/bin/env python3
"""Reads a timer run's Parquet samples with DuckDB and compares, per CPU, the row count and the
p99 of the lateness (nearest rank, as sandglass computes it) with the run's summary.json.

    python3 bench/duckdb_check.py RUN_DIR

Needs the duckdb Python package (pip install duckdb). Exit code 1 when a figure differs."""
import json
import pathlib
import sys

import duckdb


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: duckdb_check.py RUN_DIR")
    run = pathlib.Path(sys.argv[1])
    summary = json.loads((run / "summary.json").read_text())
    samples = str(run / "samples-*.parquet")
    db = duckdb.connect()
    ok = True
    print("cpu  rows(duckdb)  releases(sandglass)  p99_ns(duckdb)  p99_ns(sandglass)")
    for c in summary["cpus"]:
        cpu = c["cpu"]
        n = db.execute(
            f"select count(*) from read_parquet('{samples}') where cpu = ?", [cpu]
        ).fetchone()[0]
        # Nearest rank: the smallest value with at least 99% of the samples at or below it.
        rank = -(-99 * n // 100)
        p99 = db.execute(
            f"select lateness_ns from read_parquet('{samples}') where cpu = ? "
            "order by lateness_ns limit 1 offset ?",
            [cpu, rank - 1],
        ).fetchone()[0]
        theirs = c["lateness_ns"]["p99"]
        print(f"{cpu:>3}  {n:>12}  {c['count']:>19}  {p99:>14}  {theirs:>17}")
        ok &= n == c["count"] and p99 == theirs
    print("same" if ok else "DIFFERENT")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
