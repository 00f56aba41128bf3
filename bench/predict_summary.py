#!/usr/bin/env python3
"""The table of bench/predict.sh: what the 1 min and 6 min runs predicted against what the 60 min
run observed, per condition.

    python3 bench/predict_summary.py [--buffers 1ms,4ms] OUT CONDITION...

Predictions are sandglass's own (`analyze mttf --run` and `analyze worst-case --run`, read from
the JSON files bench/predict.sh wrote). Observed figures come from the 60 min run's samples, read
with DuckDB (pip install duckdb): P(lateness > t) over every release, the MTTF of a
double-buffered stream with buffers of t woken like the timer (t / P, the model's own cycle), with
the exact Poisson 95 % interval of the count, and the largest delay of the hour.
"""

import argparse
import json
import math
import os
import sys


def ns_of(text):
    units = {"ns": 1, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}
    for u in sorted(units, key=len, reverse=True):
        if text.endswith(u):
            return int(float(text[: -len(u)]) * units[u])
    raise ValueError(text)


def span(s):
    if s is None:
        return "-"
    if s < 1:
        return f"{s * 1e3:.3g} ms"
    if s < 120:
        return f"{s:.3g} s"
    if s < 7200:
        return f"{s / 60:.3g} min"
    return f"{s / 3600:.3g} h"


def ms(ns):
    return "-" if ns is None else f"{ns / 1e6:.3g} ms"


def chi2_quantile(p, dof):
    """The quantile of the chi-squared distribution (Wilson-Hilferty, with a bisection on the
    regularised gamma function for small counts)."""
    k = dof / 2.0

    def cdf(x):
        # Lower regularised gamma P(k, x/2) by its series.
        x = x / 2.0
        if x <= 0:
            return 0.0
        term = 1.0 / k
        total = term
        n = 1
        while n < 10000:
            term *= x / (k + n)
            total += term
            if term < total * 1e-15:
                break
            n += 1
        return total * math.exp(-x + k * math.log(x) - math.lgamma(k))

    lo, hi = 0.0, max(10.0, dof * 4 + 40)
    for _ in range(200):
        mid = (lo + hi) / 2
        if cdf(mid) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def poisson_interval(k, confidence=0.95):
    a = 1 - confidence
    lo = 0.0 if k == 0 else chi2_quantile(a / 2, 2 * k) / 2
    hi = chi2_quantile(1 - a / 2, 2 * k + 2) / 2
    return lo, hi


def observed(run, buffers_ns):
    import duckdb

    con = duckdb.connect()
    glob = os.path.join(run, "samples-*.parquet")
    n, mx = con.execute(f"select count(*), max(lateness_ns) from '{glob}'").fetchone()
    above = {}
    for b in buffers_ns:
        above[b] = con.execute(f"select count(*) from '{glob}' where lateness_ns > {b}").fetchone()[0]
    return n, mx, above


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError:
        return None


def mttf_cell(j):
    if j is None:
        return "-"
    if j.get("needs_run_s"):
        return f"needs a run of {span(j['needs_run_s'])}"
    if j.get("mttf_s") is not None:
        lo, hi = j.get("mttf_ci_low_s"), j.get("mttf_ci_high_s")
        return f"{span(j['mttf_s'])} ({span(lo)} to {span(hi)})"
    if j.get("mttf_lower_bound_s") is not None:
        return f"at least {span(j['mttf_lower_bound_s'])}"
    return "-"


def hour_cell(j):
    if j is None:
        return "-"
    h = next((h for h in j["horizons"] if h["period"] == "hour"), None)
    if h is None:
        return "-"
    if h.get("worst_case_ns") is None:
        why = "no tail model fits; " if j.get("tail") is None else ""
        return f"{why}needs a run of {span(h.get('needs_run_s'))}"
    if h.get("ci_low_ns") is not None:
        return f"{ms(h['worst_case_ns'])} ({ms(h['ci_low_ns'])} to {ms(h['ci_high_ns'])})"
    return ms(h["worst_case_ns"])


def verdict(pred, obs_s, obs_lo_s, obs_hi_s):
    """Whether the observed MTTF lies in the predicted interval, or within 2x of the point."""
    if pred is None or pred.get("mttf_s") is None or obs_s is None:
        return "-"
    lo, hi, p = pred.get("mttf_ci_low_s"), pred.get("mttf_ci_high_s"), pred["mttf_s"]
    inside = lo is not None and hi is not None and lo <= obs_s <= hi
    ratio = obs_s / p
    word = "inside" if inside else ("within 2x" if 0.5 <= ratio <= 2 else "outside")
    return f"{word} ({ratio:.2f}x)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("conditions", nargs="*", default=["idle", "cpu+disk"])
    ap.add_argument("--buffers", default="1ms,4ms")
    a = ap.parse_args()
    buffers = a.buffers.split(",")
    bns = [ns_of(b) for b in buffers]
    print("| condition | figure | predicted from the 1 min run (95 %) | predicted from the 6 min run (95 %) | observed in the 60 min run (95 %) | observed against the 1 min / 6 min prediction |")
    print("|---|---|---|---|---|---|")
    lengths = []
    models = []
    for c in a.conditions:
        base = os.path.join(a.out, c)
        run = base + "-observe"
        if not os.path.isdir(run):
            print(f"{run}: missing", file=sys.stderr)
            continue
        n, mx, above = observed(run, bns)
        for name in ("predict", "predict-long"):
            j = load(f"{base}-{name}.mttf-{buffers[0]}.json")
            if j and j.get("samples"):
                lengths.append(f"{c}-{name}: {span(j['samples'] * 1e-3)}")
        lengths.append(f"{c}-observe: {span(n * 1e-3)}")
        interval_s = 1e-3
        for b, t in zip(buffers, bns):
            k = above[t]
            t_s = t / 1e9
            if k > 0:
                lo, hi = poisson_interval(k)
                obs = t_s * n / k
                cell = f"{span(obs)} ({span(t_s * n / hi)} to {span(t_s * n / lo) if lo > 0 else '-'}), {k} above"
            else:
                obs = None
                cell = f"none above in {span(n * interval_s)} (at least {span(t_s * n / 3.689)})"
            p1 = load(f"{base}-predict.mttf-{b}.json")
            p6 = load(f"{base}-predict-long.mttf-{b}.json")
            print(f"| {c} | MTTF, 2 buffers of {b} | {mttf_cell(p1)} | {mttf_cell(p6)} | {cell} | {verdict(p1, obs, None, None)} / {verdict(p6, obs, None, None)} |")
        w1 = load(f"{base}-predict.worst-case.json")
        w6 = load(f"{base}-predict-long.worst-case.json")
        for name, w in (("1 min", w1), ("6 min", w6)):
            t = (w or {}).get("tail")
            if t:
                p = t.get("p_value")
                models.append(
                    f"{c}, {name}: above {ms(t['threshold_ns'])} ({t['exceedances']} samples, "
                    f"shape {t['shape']:.2f}, Anderson-Darling A² {t['anderson_darling']:.2f}, "
                    f"p {'< 0.01' if p is None else f'{p:.2f}'}, threshold {t.get('thresholds_tried')} of those tried)"
                )
            elif w:
                models.append(f"{c}, {name}: none ({w.get('tail_error')})")
        h6 = next((h for h in (w6 or {}).get("horizons", []) if h["period"] == "hour"), None)
        against = "-"
        if h6 and h6.get("worst_case_ns"):
            lo, hi = h6.get("ci_low_ns"), h6.get("ci_high_ns")
            inside = lo is not None and hi is not None and lo <= mx <= hi
            r = mx / h6["worst_case_ns"]
            against = f"- / {'inside' if inside else ('within 2x' if 0.5 <= r <= 2 else 'outside')} ({r:.2f}x)"
        print(f"| {c} | worst delay per hour | {hour_cell(w1)} | {hour_cell(w6)} | {ms(mx)} (the largest of {n} releases) | {against} |")
    print()
    print("Releases measured (1 ms apart): " + ", ".join(lengths) + ".")
    if models:
        print()
        print("Tail models (generalised Pareto, `analyze worst-case`): " + "; ".join(models) + ".")


if __name__ == "__main__":
    main()
