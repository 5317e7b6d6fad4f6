"""The round-trip report of `ROUNDTRIPS=1 scripts/profile-e2e` (benches/results/, "Issue 19's goals:
round trips per message"), from the snapshots profile-e2e took in its directory:

- `win0.*`, `win1.*`: the window's ends; `run0.*`, `run1.*`: just before `crewbus-load` started
  and after it exited (`run1.xact` after the server stopped and its sessions ended);
- `*.pgss`: pg_stat_statements of the measured database (queryid, toplevel, calls, total exec
  ms, rows, shared blocks hit + read, text), tab-separated; `*.xact`: its commits and rollbacks (pg_stat_database);
  `*.varz`, `*.connz`: the nats-server's monitoring endpoint; `*.loadavg`: /proc/loadavg;
  `win*.probe`: time before and after, messages and confirmed receipts in the database.

Per message is per fully delivered message in the window: confirmed receipts counted in the
database over the window ÷ recipients per message. The probe's own statement is left out.

Usage: roundtrips.py DIR LOAD_JSON CLK_TCK START END c0 c1 p0 p1 n0 n1 l0 l1 SERVER_NAME
"""

import json
import os
import sys
from collections import defaultdict


def pgss(path):
    out = {}
    for line in open(path):
        parts = line.rstrip("\n").split("\t")
        if len(parts) < 7:
            continue
        qid, top, calls, ms, rows, blks = parts[:6]
        text = "\t".join(parts[6:])
        if "roundtrips-probe" in text:
            continue
        out[(qid, top)] = (int(calls), float(ms), int(rows), int(blks), text)
    return out


def pgss_diff(a, b):
    out = {}
    for k, (calls, ms, rows, blks, text) in b.items():
        c0, m0, r0, b0, _ = a.get(k, (0, 0.0, 0, 0, text))
        if calls - c0 > 0:
            out[k] = (calls - c0, ms - m0, rows - r0, blks - b0, text)
    return out


def xact(path):
    c, r = open(path).read().split()
    return int(c), int(r)


def varz(path):
    v = json.load(open(path))
    return {k: v[k] for k in ("in_msgs", "out_msgs", "in_bytes", "out_bytes")}


def connz(path):
    v = json.load(open(path))
    out = {}
    for c in v.get("connections") or []:
        out[c["cid"]] = c
    return out


def kind(text):
    t = text.strip().lstrip("(").upper()
    if t.startswith("WITH"):
        for verb in ("INSERT", "UPDATE", "DELETE", "SELECT"):
            if f") {verb}" in t or f")\n{verb}" in t:
                return "WITH…" + verb
        return "WITH"
    return t.split(" ", 1)[0].rstrip(";")


def statements(diff, per, label, top_n=25):
    top = {k: v for k, v in diff.items() if k[1] == "t"}
    nested = {k: v for k, v in diff.items() if k[1] != "t"}
    calls = sum(v[0] for v in top.values())
    ms = sum(v[1] for v in top.values())
    by_kind = defaultdict(int)
    for v in top.values():
        by_kind[kind(v[4])] += v[0]
    blocks = sum(v[3] for v in top.values())
    print(f"  Postgres top-level statements: {calls / per:.2f} per message ({ms / per:.3f} ms executing, "
          f"{blocks / per:.0f} shared blocks hit or read, nested statements' included); "
          f"nested (inside functions/triggers): {sum(v[0] for v in nested.values()) / per:.2f}")
    print("    by kind: " + ", ".join(f"{k} {c / per:.2f}" for k, c in sorted(by_kind.items(), key=lambda x: -x[1])))
    print(f"    top statements ({label}): calls per message, exec ms per message, rows per call, "
          f"shared blocks per call, text")
    for (qid, t), (c, m, r, b, text) in sorted(top.items(), key=lambda x: -x[1][0])[:top_n]:
        if c / per < 0.005:
            break
        print(f"    {c / per:7.3f} {m / per:7.3f} {r / c:8.1f} {b / c:8.1f}  {text[:220]}")
    print("    top statements by exec time (ms executing per message, calls per message, ms and shared "
          "blocks per call, text):")
    for (qid, t), (c, m, r, b, text) in sorted(top.items(), key=lambda x: -x[1][1])[:10]:
        print(f"    {m / per:7.3f} {c / per:7.4f} {m / c:7.2f} {b / c:8.1f}  {text[:160]}")
    print("    top nested statements (foreign-key checks and the like, run inside a top-level one):")
    for (qid, t), (c, m, r, b, text) in sorted(nested.items(), key=lambda x: -x[1][0])[:8]:
        if c / per < 0.005:
            break
        print(f"    {c / per:7.3f} {m / per:7.3f} {r / c:8.1f}  {text[:160]}")


def nats(v0, v1, c0, c1, per):
    d = {k: v1[k] - v0[k] for k in v0}
    print(f"  nats-server: {d['in_msgs'] / per:.2f} messages in, {d['out_msgs'] / per:.2f} out per message "
          f"({d['in_bytes'] / per:.0f} / {d['out_bytes'] / per:.0f} bytes)")
    for cid, c in sorted(c1.items()):
        a = c0.get(cid, {})
        i = c.get("in_msgs", 0) - a.get("in_msgs", 0)
        o = c.get("out_msgs", 0) - a.get("out_msgs", 0)
        if i or o:
            name = c.get("name") or "-"
            print(f"    connection {cid} ({name}, {c.get('lang', '?')} {c.get('version', '')}, "
                  f"{'closed' if c.get('stop') else 'open'}): {i / per:.2f} in, {o / per:.2f} out per message")


def main():
    d = sys.argv[1]
    load = json.load(open(sys.argv[2]))
    hz, start, end = float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
    c0, c1, p0, p1, n0, n1, l0, l1 = map(float, sys.argv[6:14])
    server = sys.argv[14]
    f = lambda n: os.path.join(d, n)
    recipients = load["recipients_per_message"]

    pa, pb = open(f("win0.probe")).read().split(), open(f("win1.probe")).read().split()
    t0, t1 = (float(pa[0]) + float(pa[1])) / 2, (float(pb[0]) + float(pb[1])) / 2
    m0, r0, m1, r1 = int(pa[2]), int(pa[3]), int(pb[2]), int(pb[3])
    accepted, delivered = m1 - m0, (r1 - r0) / recipients
    rate = delivered / (t1 - t0)
    print()
    print(f"round trips, window {t1 - t0:.1f} s: {accepted} messages accepted, {r1 - r0} receipts confirmed "
          f"= {delivered:.0f} messages fully delivered ({rate:.0f}/s); per fully delivered message:")
    print(f"  load average: {open(f('win0.loadavg')).read().strip()} at the start, "
          f"{open(f('win1.loadavg')).read().strip()} at the end")
    statements(pgss_diff(pgss(f("win0.pgss")), pgss(f("win1.pgss"))), delivered, "window")
    (xc0, xr0), (xc1, xr1) = xact(f("win0.xact")), xact(f("win1.xact"))
    print(f"  Postgres transactions: {(xc1 - xc0) / delivered:.2f} commits, {(xr1 - xr0) / delivered:.3f} "
          f"rollbacks per message (pg_stat_database, as its sessions report them)")
    nats(varz(f("win0.varz")), varz(f("win1.varz")), connz(f("win0.connz")), connz(f("win1.connz")), delivered)
    secs = end - start
    print(f"  core-ms per message at the window's rate: " + ", ".join(
        f"{name} {1000 * (b - a) / hz / secs / rate:.2f}"
        for name, a, b in ((server, c0, c1), ("Postgres", p0, p1), ("nats-server", n0, n1), ("crewbus-load", l0, l1))))

    per = load["accepted"]
    print()
    print(f"round trips over the whole load ({per} messages; team set-up, drain and the zero-loss check's "
          f"reads included), per message:")
    print(f"  load average at the end: {open(f('run1.loadavg')).read().strip()}")
    statements(pgss_diff(pgss(f("run0.pgss")), pgss(f("run1.pgss"))), per, "whole load", top_n=40)
    (xc0, xr0), (xc1, xr1) = xact(f("run0.xact")), xact(f("run1.xact"))
    print(f"  Postgres transactions: {(xc1 - xc0) / per:.2f} commits, {(xr1 - xr0) / per:.3f} rollbacks per message")
    nats(varz(f("run0.varz")), varz(f("run1.varz")), connz(f("run0.connz")), connz(f("run1.connz")), per)


if __name__ == "__main__":
    main()
