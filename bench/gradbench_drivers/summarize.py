#!/usr/bin/env python3
"""Summarize GradBench logs written by bench/gradbench_drivers/run_gradbench.sh.

Usage: summarize.py [LOGDIR] (default $GB_DIR/logs, GB_DIR defaulting to /tmp/gb). Reads LOGDIR/<eval>-<tool>.jsonl
(the `gradbench run -o` format: {"elapsed":..., "message": ...} then
{"elapsed":..., "response": ...}) and prints one Markdown table per eval:
median "evaluate" time in ms per (workload, function) for graft and JAX, the
ratio graft/JAX, and the validation verdicts.
"""

import json
import os
import statistics
import sys
from pathlib import Path

EVAL_ORDER = ["lse", "llsq", "ode", "kmeans", "gmm", "det", "lstm"]
TOOLS = ["graft", "jax"]


def read_log(path):
    """Return {(workload, function): row} in the eval's order, plus the start response."""
    messages = {}  # id -> message
    responses = {}  # id -> response
    order = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        entry = json.loads(line)
        if "message" in entry:
            m = entry["message"]
            messages[m["id"]] = m
            order.append(m["id"])
        elif "response" in entry:
            r = entry["response"]
            responses[r.get("id")] = r
    rows = {}
    verdicts = {}  # evaluate id -> (valid, error)
    for i in order:
        m = messages[i]
        if m["kind"] == "analysis":
            verdicts[m["of"]] = (m.get("valid"), m.get("error"))
    define_ok = all(
        responses.get(i, {}).get("success", False)
        for i in order
        if messages[i]["kind"] == "define"
    )
    for i in order:
        m = messages[i]
        if m["kind"] != "evaluate":
            continue
        r = responses.get(i)
        key = (m.get("description") or "", m["function"])
        row = {"status": "no response", "median_ms": None, "runs": 0, "valid": None}
        if r is not None:
            if r.get("success"):
                ts = [
                    t["nanoseconds"] / 1e6
                    for t in r.get("timings") or []
                    if t["name"] == "evaluate"
                ]
                row["runs"] = len(ts)
                row["median_ms"] = statistics.median(ts) if ts else None
                row["status"] = "ok"
            else:
                row["status"] = "failed: " + str(r.get("error", ""))[:80].replace("\n", " ")
        if i in verdicts:
            row["valid"] = verdicts[i][0]
            if verdicts[i][0] is False:
                row["error"] = (verdicts[i][1] or "")[:200]
        rows[key] = row
    return rows, define_ok


def fmt(x):
    if x is None:
        return "—"
    return f"{x:.3g}"


def cell(row):
    if row is None:
        return "—"
    if row["status"] != "ok":
        return row["status"].split(":")[0]
    return fmt(row["median_ms"])


def vmark(row):
    if row is None:
        return "—"
    if row["status"] != "ok":
        return "✗"
    return {True: "✓", False: "✗", None: "?"}[row["valid"]]


def main():
    logdir = Path(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.environ.get("GB_DIR", "/tmp/gb"), "logs"))
    found = {}
    for p in sorted(logdir.glob("*.jsonl")):
        ev, _, tool = p.stem.rpartition("-")
        found.setdefault(ev, {})[tool] = p
    evals = [e for e in EVAL_ORDER if e in found] + sorted(
        e for e in found if e not in EVAL_ORDER
    )
    settings = logdir / "settings.txt"
    if settings.exists():
        print("Settings:\n\n```\n" + settings.read_text().rstrip() + "\n```\n")
    all_valid = True
    for ev in evals:
        data = {t: read_log(p) for t, p in found[ev].items()}
        tools = [t for t in TOOLS if t in data] + sorted(t for t in data if t not in TOOLS)
        keys = []
        for t in tools:
            for k in data[t][0]:
                if k not in keys:
                    keys.append(k)
        print(f"### {ev}\n")
        header = ["workload", "function"] + [f"{t} ms" for t in tools]
        if "graft" in tools and "jax" in tools:
            header.append("graft/jax")
        header.append("valid (" + "/".join(tools) + ")")
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for k in keys:
            rs = [data[t][0].get(k) for t in tools]
            line = [k[0], k[1]] + [cell(r) for r in rs]
            if "graft" in tools and "jax" in tools:
                g, j = data["graft"][0].get(k), data["jax"][0].get(k)
                if g and j and g["median_ms"] and j["median_ms"]:
                    line.append(f"{g['median_ms'] / j['median_ms']:.3g}")
                else:
                    line.append("—")
            line.append("/".join(vmark(r) for r in rs))
            print("| " + " | ".join(line) + " |")
        print()
        for t in tools:
            rows, define_ok = data[t]
            n = len(rows)
            nvalid = sum(1 for r in rows.values() if r["status"] == "ok" and r["valid"])
            minruns = min((r["runs"] for r in rows.values() if r["status"] == "ok"), default=0)
            ok = define_ok and n > 0 and nvalid == n
            all_valid &= ok
            extra = "" if define_ok else " (define failed)"
            print(f"- {t}: {nvalid}/{n} outputs valid{extra}; fewest timed runs per input: {minruns}")
            for k, r in rows.items():
                if r.get("error") or r["status"] != "ok":
                    print(f"  - {k[0]} {k[1]}: {r['status']} {r.get('error', '')}".rstrip())
        print()
    print("ALL VALID" if all_valid and evals else "NOT ALL VALID")
    return 0 if all_valid and evals else 1


if __name__ == "__main__":
    sys.exit(main())
