#!/usr/bin/env python3
"""The partition test's checker: the whole history (scripts/partition/load.py's records, the
webhook receiver's, the nemesis's events) against the private Postgres ledger (psql), after the
final heal and the quiet period. Exit 1 with every violation listed when one fails; prints the
per-fault table either way.

What it checks (issue 20, item 3):
  * every send answered 201/200 is in the ledger exactly once — the message the answer named,
    with the digest of the body sent — and every ledger message of the team is a send of the
    load (no phantom, no second copy of one request id); every message is stored;
  * seq is gap-free from 1 in every conversation (and next_seq follows the last);
  * every recipient of every stored message (the revoked agent aside) has its receipt delivered,
    confirmed it exactly once (at most one `confirmed` outcome per (message, recipient), at least
    one `confirmed`/`already_confirmed`), and is never handed it again by a fetch that started
    after a confirm of it was answered (redeliveries before the confirm are counted);
  * every body handed out has the digest of what was sent;
  * nothing is handed to the revoked agent after its revocation took effect (committed, which is
    before the revoke command returned): no hand-out in the ledger issued after the revoke
    command returned, no delivery from a fetch that started after it returned. A hand-out issued
    after revoked_at but before the command returned is not one: revoked_at is the revoke's
    clock reading before its transaction, and a fetch whose transaction read the agent before
    the revoke committed is ordered before it (counted and reported as concurrent);
  * the push destination received every record of every run at least once, the first receptions
    in journal order (duplicates counted by webhook-id).

`--wait-push SECONDS` only waits (deadline) until the receiver holds every record of every run.
"""

import argparse
import collections
import csv
import io
import json
import os
import subprocess
import sys
import time
from datetime import datetime


def jsonl(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def ts(text):
    """A Postgres timestamptz (as psql prints it with TimeZone=UTC) → epoch seconds."""
    if not text:
        return None
    text = text.replace(" ", "T")
    if text.endswith("+00"):
        text = text[:-3] + "+00:00"
    return datetime.fromisoformat(text).timestamp()


class Ledger:
    def __init__(self, psql):
        self.psql = psql

    def rows(self, sql):
        out = subprocess.run(self.psql + ["--csv", "-c", "SET TimeZone = 'UTC'", "-c", sql],
                             check=True, capture_output=True, text=True).stdout
        # The SET prints "SET" first in --csv mode.
        lines = out.splitlines()
        if lines and lines[0] == "SET":
            lines = lines[1:]
        return list(csv.DictReader(io.StringIO("\n".join(lines))))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--work", required=True, help="the run's work directory (history/ under it)")
    p.add_argument("--psql", required=True, help="psql command line, space separated")
    p.add_argument("--team", default="part")
    p.add_argument("--wait-push", type=float, default=None)
    p.add_argument("--table", default=None, help="also write the per-fault table here (markdown)")
    a = p.parse_args()
    h = os.path.join(a.work, "history")
    ledger = Ledger(a.psql.split())
    team = ledger.rows(f"SELECT id FROM teams WHERE name = '{a.team}'")
    if len(team) != 1:
        sys.exit(f"check: team {a.team} not found once in the ledger")
    team_id = team[0]["id"]

    runs_sql = f"SELECT r.id, r.last_seq FROM runs r WHERE r.team_id = '{team_id}'"
    if a.wait_push is not None:
        deadline = time.time() + a.wait_push
        while True:
            runs = {r["id"]: int(r["last_seq"]) for r in ledger.rows(runs_sql)}
            got = collections.defaultdict(set)
            for x in jsonl(os.path.join(h, "hooks.jsonl")):
                if x.get("seq") is not None:
                    got[x["run"]].add(int(x["seq"]))
            missing = {r: n - len(got[r] & set(range(1, n + 1))) for r, n in runs.items()}
            if all(v == 0 for v in missing.values()):
                return
            if time.time() > deadline:
                print(f"check: push not caught up within {a.wait_push:.0f} s: records missing per run {missing}",
                      file=sys.stderr)
                return  # the full check reports it
            time.sleep(0.2)

    violations = []

    def fail(what):
        violations.append(what)

    agents = json.load(open(os.path.join(a.work, "agents.json")))
    name_of = {v["id"]: k for k, v in agents.items()}
    requests = jsonl(os.path.join(h, "requests.jsonl"))
    deliveries = jsonl(os.path.join(h, "deliveries.jsonl"))
    confirms = jsonl(os.path.join(h, "confirms.jsonl"))
    hooks = jsonl(os.path.join(h, "hooks.jsonl"))
    events = jsonl(os.path.join(h, "events.jsonl"))

    messages = ledger.rows(
        "SELECT id, conversation_id, seq, sender_id, request_id, body_sha256, publication, sent_at, stored_at "
        f"FROM messages WHERE team_id = '{team_id}'")
    by_id = {m["id"]: m for m in messages}
    receipts = ledger.rows(
        "SELECT r.message_id, r.recipient_id, r.delivered_at FROM receipts r JOIN messages m "
        f"ON m.id = r.message_id WHERE m.team_id = '{team_id}'")
    hand_outs = ledger.rows(
        "SELECT delivery_id, message_id, recipient_id, issued_at, redelivered FROM hand_outs "
        f"WHERE team_id = '{team_id}'")
    agent_rows = ledger.rows(f"SELECT id, name, revoked_at FROM agents WHERE team_id = '{team_id}'")
    revoked = {r["id"]: ts(r["revoked_at"]) for r in agent_rows if r["revoked_at"]}
    conversations = ledger.rows(f"SELECT id, next_seq FROM conversations WHERE team_id = '{team_id}'")

    # --- sends: every 201/200 exactly once, with its body --------------------------------------
    sends = [r for r in requests if r["op"] == "send"]
    sent_digest = {}   # (agent, request_id) → digest
    for r in sends:
        key = (r["agent"], r["request_id"])
        if sent_digest.setdefault(key, r["digest"]) != r["digest"]:
            fail(f"the load sent two bodies under {key} (a harness bug)")
    answered = [r for r in sends if r["status"] in (200, 201)]
    ledger_key = collections.Counter((name_of.get(m["sender_id"], m["sender_id"]), m["request_id"])
                                     for m in messages)
    for key, n in ledger_key.items():
        if n != 1:
            fail(f"request {key} is in the ledger {n} times")
        if key not in sent_digest:
            fail(f"ledger message for {key} was never sent by the load (phantom)")
    message_of_request = {}
    for r in answered:
        key = (r["agent"], r["request_id"])
        m = by_id.get(r["message"])
        if m is None:
            fail(f"send {key} answered {r['status']} (message {r['message']}, seq {r.get('seq')}, "
                 f"server {r['server']}, at {r['t1']:.3f}) is not in the ledger")
            continue
        if (name_of.get(m["sender_id"]), m["request_id"]) != key:
            fail(f"send {key} answered with message {r['message']}, which the ledger holds for "
                 f"{(name_of.get(m['sender_id']), m['request_id'])}")
        if m["body_sha256"] != r["digest"]:
            fail(f"send {key}: ledger body digest {m['body_sha256']} ≠ sent {r['digest']}")
        if int(m["seq"]) != r["seq"]:
            fail(f"send {key}: answered seq {r['seq']}, ledger seq {m['seq']}")
        prior = message_of_request.setdefault(key, r["message"])
        if prior != r["message"]:
            fail(f"send {key} answered with two messages: {prior} and {r['message']}")
    created = collections.Counter((r["agent"], r["request_id"]) for r in answered if r["status"] == 201)
    for key, n in created.items():
        if n > 1:
            fail(f"send {key} answered 201 (created) {n} times")
    not_stored = [m["id"] for m in messages if m["publication"] != "stored"]
    if not_stored:
        fail(f"{len(not_stored)} messages not stored after the quiet period: {not_stored[:5]}")

    # --- gap-free seq per conversation ---------------------------------------------------------
    seqs = collections.defaultdict(list)
    for m in messages:
        seqs[m["conversation_id"]].append(int(m["seq"]))
    for c in conversations:
        got = sorted(seqs.get(c["id"], []))
        if got != list(range(1, len(got) + 1)):
            missing = sorted(set(range(1, (max(got) if got else 0) + 1)) - set(got))
            fail(f"conversation {c['id']}: seq not gap-free (missing {missing[:10]})")
        if int(c["next_seq"]) != len(got) + 1:
            fail(f"conversation {c['id']}: next_seq {c['next_seq']} after {len(got)} messages")

    # --- bodies handed out -----------------------------------------------------------------
    for d in deliveries:
        m = by_id.get(d["message"])
        if m is None:
            fail(f"delivery {d['delivery_id']} to {d['agent']} names message {d['message']}, not in the ledger")
        elif d["digest"] != m["body_sha256"] and not d.get("truncated"):
            fail(f"delivery {d['delivery_id']} of {d['message']} to {d['agent']}: body digest "
                 f"{d['digest']} ≠ sent {m['body_sha256']}")

    # --- exactly once per recipient; never again after the confirm ------------------------------
    outcomes = collections.defaultdict(list)   # (message, agent) → [(t1, outcome, delivery)]
    delivery_msg = {d["delivery_id"]: d["message"] for d in deliveries}
    for c in confirms:
        msg = c.get("message") or delivery_msg.get(c["delivery_id"])
        outcomes[(msg, c["agent"])].append((c["t1"], c["outcome"], c["delivery_id"]))
    unknown = [c for c in confirms if c["outcome"] == "unknown"]
    first_confirm = {}
    for key, items in outcomes.items():
        confirmed = [i for i in items if i[1] == "confirmed"]
        if len(confirmed) > 1:
            fail(f"message {key[0]} confirmed {len(confirmed)} times by {key[1]} "
                 f"(deliveries {[i[2] for i in confirmed]})")
        done = [i[0] for i in items if i[1] in ("confirmed", "already_confirmed")]
        if done:
            first_confirm[key] = min(done)
    for d in deliveries:
        t = first_confirm.get((d["message"], d["agent"]))
        if t is not None and d["t0"] > t:
            fail(f"message {d['message']} handed to {d['agent']} again (delivery {d['delivery_id']}, "
                 f"fetch at {d['t0']:.3f} on {d['server']}) after its confirm was answered at {t:.3f}")
    for r in receipts:
        agent = name_of.get(r["recipient_id"], r["recipient_id"])
        if r["recipient_id"] in revoked:
            continue
        if not r["delivered_at"]:
            fail(f"receipt of message {r['message_id']} for {agent} never delivered")
        elif (r["message_id"], agent) not in first_confirm:
            fail(f"message {r['message_id']}: {agent}'s receipt is delivered but no confirm of it was answered to {agent}")

    # --- the revoked agent ---------------------------------------------------------------------
    revoke_events = [e for e in events if e.get("ev") == "revoke"]
    for agent_id, at in revoked.items():
        name = name_of.get(agent_id, agent_id)
        returned = [e["t_end"] for e in revoke_events if e.get("agent") == name]
        # The revocation had committed by the time its command returned (the first return).
        took_effect = min(returned) if returned else at
        after = [x for x in hand_outs if x["recipient_id"] == agent_id and ts(x["issued_at"]) > at]
        concurrent = [x for x in after if ts(x["issued_at"]) <= took_effect]
        if concurrent:
            print(f"  {len(concurrent)} hand-out(s) to {name} issued while its revocation committed "
                  f"(after revoked_at {at:.3f}, before the command returned at {took_effect:.3f}): "
                  f"ordered before it, allowed")
        for x in after:
            if ts(x["issued_at"]) > took_effect:
                fail(f"hand-out {x['delivery_id']} of {x['message_id']} to revoked {name} issued at "
                     f"{x['issued_at']}, after the revocation returned ({took_effect:.3f})")
        for e in revoke_events:
            if e.get("agent") == name:
                for d in deliveries:
                    if d["agent"] == name and d["t0"] > e["t_end"]:
                        fail(f"delivery {d['delivery_id']} of {d['message']} to revoked {name} from a fetch "
                             f"started {d['t0'] - e['t_end']:.3f} s after the revocation returned")
    if not revoke_events or not revoked:
        fail("no agent was revoked during the run (the revocation check did not run)")

    # --- push: every record of every run, in order ------------------------------------------
    journal = ledger.rows(
        "SELECT j.run_id, j.seq, j.kind FROM journal_records j JOIN runs r ON r.id = j.run_id "
        f"WHERE r.team_id = '{team_id}'")
    expected = collections.defaultdict(dict)
    for j in journal:
        expected[j["run_id"]][int(j["seq"])] = json.loads(j["kind"]).get("kind")
    received = collections.defaultdict(list)
    seen_ids = collections.Counter()
    for x in hooks:
        if x.get("seq") is None:
            fail(f"push POST without a record: {x}")
            continue
        received[x["run"]].append(int(x["seq"]))
        seen_ids[x["webhook_id"]] += 1
        kind = expected.get(x["run"], {}).get(int(x["seq"]))
        if kind is None:
            fail(f"push of run {x['run']} seq {x['seq']}: no such journal record")
        elif x.get("type") != f"dev.crewbus.run.{kind}":
            fail(f"push of run {x['run']} seq {x['seq']}: type {x.get('type')}, journal kind {kind}")
    ids_per_record = collections.defaultdict(set)
    for x in hooks:
        if x.get("seq") is not None:
            ids_per_record[(x["run"], int(x["seq"]))].add(x["webhook_id"])
    for k, v in ids_per_record.items():
        if len(v) != 1:
            fail(f"push record {k} arrived under {len(v)} webhook-ids")
    for run, recs in expected.items():
        got = received.get(run, [])
        missing = sorted(set(recs) - set(got))
        if missing:
            fail(f"run {run}: {len(missing)} journal records never pushed (seq {missing[:10]})")
        firsts = []
        for s in got:
            if s not in firsts:
                firsts.append(s)
        if firsts != sorted(firsts):
            fail(f"run {run}: first receptions out of journal order: {firsts[:20]}")
    push_duplicates = sum(n - 1 for n in seen_ids.values())

    # --- the per-fault table -------------------------------------------------------------------
    faults = [e for e in events if e.get("ev") == "fault"]
    heals = {e["fault"]: e for e in events if e.get("ev") == "heal"}
    end = max([r["t1"] for r in requests] + [time.time()])
    starts = [e["t"] for e in faults] + [end]
    accepted_at = {}   # message → t1 of its first 2xx answer
    for r in answered:
        accepted_at.setdefault(r["message"], r["t1"])
    recipients = collections.defaultdict(list)
    for r in receipts:
        if r["recipient_id"] not in revoked:
            recipients[r["message_id"]].append(name_of.get(r["recipient_id"], r["recipient_id"]))
    hook_seen = set()
    hook_dup_at = []
    for x in sorted(hooks, key=lambda x: x["t"]):
        if x["webhook_id"] in hook_seen:
            hook_dup_at.append(x["t"])
        hook_seen.add(x["webhook_id"])
    rows = []
    windows = [({"fault": "warm-up", "t": requests[0]["t0"] if requests else 0, "servers": []}, None)]
    windows += [(f, heals.get(f["fault"])) for f in faults]
    bounds = [w[0]["t"] for w in windows] + [end]
    for i, (f, heal) in enumerate(windows):
        lo, hi = bounds[i], bounds[i + 1]
        win = [r for r in requests if lo <= r["t0"] < hi and r["op"] in ("send", "fetch", "confirm")]
        answered_n = sum(1 for r in win if isinstance(r["status"], int))
        retryable = sum(1 for r in win if r["status"] in (429, 503))
        no_answer = sum(1 for r in win if not isinstance(r["status"], int))
        redeliveries = sum(1 for d in deliveries if lo <= d["t1"] < hi and d["redelivered"])
        dups = sum(1 for t in hook_dup_at if lo <= t < hi)
        first_ok = caught = "-"
        if heal:
            ht = heal["t"]
            affected = set(f.get("servers") or ["s1", "s2"])
            oks = [r["t1"] for r in requests if r["t0"] >= ht and r["server"] in affected
                   and r["op"] in ("send", "fetch", "confirm") and r["status"] in (200, 201)]
            first_ok = f"{min(oks) - ht:.2f}" if oks else "never"
            pending = [m for m, t in accepted_at.items() if t <= ht]
            last = ht
            complete = True
            for m in pending:
                for who in recipients.get(m, []):
                    t = first_confirm.get((m, who))
                    if t is None:
                        complete = False
                    else:
                        last = max(last, t)
            caught = f"{last - ht:.2f}" if complete else "never"
        rows.append([f["fault"], f.get("detail", ""), len(win), answered_n, retryable, no_answer,
                     redeliveries, dups, first_ok, caught])
    head = ["fault", "detail", "attempted", "answered", "refused retryable", "no answer",
            "redeliveries", "push duplicates", "heal→first success s", "heal→inbox caught up s"]
    table = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    table += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    print("\n".join(table))
    if a.table:
        open(a.table, "w").write("\n".join(table) + "\n")
    totals = {
        "sends answered": len({(r["agent"], r["request_id"]) for r in answered}),
        "ledger messages": len(messages),
        "receipts": len(receipts),
        "deliveries": len(deliveries),
        "redeliveries": sum(1 for d in deliveries if d["redelivered"]),
        "confirm outcomes unknown": len(unknown),
        "runs": len(expected),
        "journal records": sum(len(v) for v in expected.values()),
        "push POSTs": len(hooks),
        "push duplicates": push_duplicates,
        "sends abandoned": sum(1 for r in requests if r["op"] == "send_abandoned"),
    }
    print("totals: " + ", ".join(f"{k} {v}" for k, v in totals.items()))
    if violations:
        print(f"\ncheck: {len(violations)} violation(s):", file=sys.stderr)
        for v in violations[:200]:
            print("  - " + v, file=sys.stderr)
        sys.exit(1)
    print("check: the whole history holds (every check above passed)")


if __name__ == "__main__":
    main()
