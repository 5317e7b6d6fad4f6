#!/usr/bin/env python3
"""Load check: N agents x M messages through a real `crewbus serve`, every message delivered to
every recipient exactly once. Python standard library only.

It creates a team and agents with the operator CLI (a database must be configured: crewbus.toml,
--config or CREWBUS_DATABASE__URL), starts `crewbus serve` on a free port, puts all agents in one
conversation, lets every agent send M messages while every agent fetches and confirms what it
receives, then checks the receipts through the API and prints throughput and latency.

  scripts/load.py --crewbus target/release/crewbus --agents 5 --messages 200 [--backend jetstream]

Exit code 0 only when every recipient confirmed every message exactly once.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid


def cli(binary, *args):
    out = subprocess.run([binary, "--json", *args], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"crewbus {' '.join(args)} failed: {out.stdout}{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def call(base, token, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("content-type", "application/json")
    for attempt in range(50):
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            if e.code in (429, 503):
                time.sleep(0.05 * (attempt + 1))
                continue
            raise SystemExit(f"{method} {path}: {e.code} {e.read().decode()}")
    raise SystemExit(f"{method} {path}: still unavailable")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--crewbus", default="target/release/crewbus")
    ap.add_argument("--agents", type=int, default=5)
    ap.add_argument("--messages", type=int, default=200, help="messages per agent")
    ap.add_argument("--backend", choices=["postgres", "jetstream"], default=None,
                    help="the team's body backend and inbox (default: the ledger's own)")
    args = ap.parse_args()
    binary = args.crewbus

    cli(binary, "migrate")
    team_name = f"load-{uuid.uuid4().hex[:8]}"
    add = ["team", "add", team_name]
    if args.backend:
        add += ["--backend", args.backend, "--inbox", args.backend]
    team = cli(binary, *add)
    if args.backend == "jetstream":
        cli(binary, "stream", "provision", "--team", team["id"])
    agents = [cli(binary, "agent", "add", "--team", team["id"], f"agent{i}") for i in range(args.agents)]

    port = free_port()
    env = dict(os.environ, CREWBUS_LISTEN=f"127.0.0.1:{port}", CREWBUS_LOG__LEVEL="warn")
    server = subprocess.Popen([binary, "serve"], env=env, stdout=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while True:
        try:
            urllib.request.urlopen(base + "/health", timeout=2).read()
            break
        except Exception:
            if time.time() > deadline:
                server.kill()
                sys.exit("the server did not come up")
            time.sleep(0.05)

    try:
        conv = call(base, agents[0]["token"], "POST", "/v1/conversations",
                    {"title": "load", "members": [a["id"] for a in agents[1:]]})
        sent_at = {}
        lock = threading.Lock()
        latencies = []
        confirmed = {a["id"]: {} for a in agents}  # agent -> message -> confirm count
        deliveries = [0]
        redeliveries = [0]
        expected_per_agent = (args.agents - 1) * args.messages
        errors = []

        def sender(i, agent):
            for k in range(args.messages):
                rid = f"{i}-{k}"
                with lock:
                    sent_at[rid] = time.monotonic()
                call(base, agent["token"], "POST", f"/v1/conversations/{conv['id']}/messages",
                     {"request_id": rid, "body": f"message {k} from agent{i}"})

        def receiver(agent):
            mine = confirmed[agent["id"]]
            stop = time.time() + 300
            while len(mine) < expected_per_agent:
                if time.time() > stop:
                    errors.append(f"{agent['name']} got {len(mine)} of {expected_per_agent}")
                    return
                got = call(base, agent["token"], "POST", "/v1/inbox/fetch", {"limit": 100})["deliveries"]
                if not got:
                    time.sleep(0.01)
                    continue
                now = time.monotonic()
                with lock:
                    deliveries[0] += len(got)
                    for d in got:
                        if d["redelivered"]:
                            redeliveries[0] += 1
                        elif d["message"]["request_id"] in sent_at:
                            latencies.append(now - sent_at[d["message"]["request_id"]])
                res = call(base, agent["token"], "POST", "/v1/inbox/confirm",
                           {"deliveries": [d["delivery_id"] for d in got]})["results"]
                for r in res:
                    if r["outcome"] == "confirmed":
                        mine[r["message"]] = mine.get(r["message"], 0) + 1

        start = time.monotonic()
        threads = [threading.Thread(target=sender, args=(i, a)) for i, a in enumerate(agents)]
        threads += [threading.Thread(target=receiver, args=(a,)) for a in agents]
        for t in threads:
            t.start()
        for t in threads[: len(agents)]:
            t.join()
        send_secs = time.monotonic() - start
        for t in threads[len(agents):]:
            t.join()
        total_secs = time.monotonic() - start

        # Verify with the ledger: every message has one delivered receipt per recipient.
        messages = []
        after = 0
        while True:
            page = call(base, agents[0]["token"], "GET",
                        f"/v1/conversations/{conv['id']}/messages?after_seq={after}&limit=1000")
            messages += page["messages"]
            if page["next_after_seq"] == after:
                break
            after = page["next_after_seq"]
        total = args.agents * args.messages
        bad = [e for e in errors]
        if len(messages) != total:
            bad.append(f"history holds {len(messages)} of {total} messages")
        for a in agents:
            twice = [m for m, n in confirmed[a["id"]].items() if n != 1]
            if twice:
                bad.append(f"{a['name']} confirmed {len(twice)} messages more than once")
        sample = messages[:: max(1, len(messages) // 100)]
        for m in sample:
            receipts = call(base, agents[0]["token"], "GET", f"/v1/messages/{m['message']['id']}/receipts")
            if len(receipts) != args.agents - 1 or any(r["delivered_at"] is None for r in receipts):
                bad.append(f"message {m['message']['seq']}: receipts {receipts}")
        latencies.sort()

        def pct(q):
            return latencies[min(len(latencies) - 1, int(len(latencies) * q))] * 1e3 if latencies else 0.0

        print(json.dumps({
            "agents": args.agents,
            "messages": total,
            "deliveries_expected": total * (args.agents - 1),
            "deliveries_confirmed": sum(len(v) for v in confirmed.values()),
            "deliveries_handed_out": deliveries[0],
            "redeliveries": redeliveries[0],
            "send_seconds": round(send_secs, 2),
            "total_seconds": round(total_secs, 2),
            "sends_per_second": round(total / send_secs, 1),
            "deliveries_per_second": round(total * (args.agents - 1) / total_secs, 1),
            "latency_p50_ms": round(pct(0.50), 1),
            "latency_p99_ms": round(pct(0.99), 1),
            "receipts_checked": len(sample),
            "exactly_once": not bad,
            "problems": bad[:10],
        }, indent=2))
        return 0 if not bad else 1
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        if args.backend == "jetstream":
            subprocess.run([binary, "stream", "remove", "--team", team["id"]], capture_output=True)


if __name__ == "__main__":
    sys.exit(main())
