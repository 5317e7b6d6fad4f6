#!/usr/bin/env python3
"""The partition test's load clients (run in the `cl` namespace by scripts/partition-test).

Agents of one team talk through both crewbus servers over the HTTP API, each agent pinned to one
server (as a client configured with one URL): senders send with their own request ids and retry
with the same request id and body on errors and timeouts, as a real client does; every agent
fetches (waiting), confirms (a few deliveries are left unconfirmed once so they come back
redelivered) and works inside a run (sends and confirms name it; the runs are sealed at the
end). Every request and its answer is recorded, JSON lines under --out:

  requests.jsonl    one line per HTTP request: t0, t1, server, agent, op, status ("timeout" /
                    "error" when no answer), attempt, and per op: conversation, request_id,
                    digest, message, seq, created
  deliveries.jsonl  one line per delivery handed out: the fetch's t0/t1, agent, delivery_id,
                    message, conversation, seq, redelivered, digest of the body received
  confirms.jsonl    one line per confirm result: t0/t1 of the answer, agent, delivery_id,
                    message, outcome
  runs.jsonl        the runs (agent, run id), conversations.json the conversations

Control files under --control (written by the harness): stop-sending (senders finish the send
in hand, retrying until it is answered, then stop: `sent-done` is written), stop-receiving
(receivers finish confirming what they hold, the runs are sealed: `sealed` is written, exit).
Python 3 standard library only.
"""

import argparse
import hashlib
import http.client
import json
import os
import random
import sys
import threading
import time
import urllib.parse

RETRYABLE = {429, 500, 502, 503, 504}


class Recorder:
    def __init__(self, out):
        os.makedirs(out, exist_ok=True)
        self.files = {}
        self.lock = threading.Lock()
        self.out = out

    def write(self, name, record):
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with self.lock:
            f = self.files.get(name)
            if f is None:
                f = self.files[name] = open(os.path.join(self.out, name), "a", buffering=1)
            f.write(line)

    def close(self):
        with self.lock:
            for f in self.files.values():
                f.close()


class Client:
    """One agent's HTTP client to its server (one kept-alive connection per thread)."""

    def __init__(self, agent, token, server, url, rec):
        self.agent, self.token, self.server, self.rec = agent, token, server, rec
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port
        self.local = threading.local()

    def _conn(self, timeout):
        c = getattr(self.local, "conn", None)
        if c is None:
            c = self.local.conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        c.timeout = timeout
        if c.sock is not None:
            c.sock.settimeout(timeout)
        return c

    def _drop(self):
        c = getattr(self.local, "conn", None)
        if c is not None:
            c.close()
        self.local.conn = None

    def call(self, method, path, body=None, timeout=5.0, op="", extra=None, attempt=1):
        """One request; returns (status or "timeout"/"error", parsed JSON or None). Recorded."""
        t0 = time.time()
        status, answer, error = None, None, None
        try:
            c = self._conn(timeout)
            data = None if body is None else json.dumps(body).encode()
            headers = {"Authorization": "Bearer " + self.token}
            if data is not None:
                headers["Content-Type"] = "application/json"
            c.request(method, path, body=data, headers=headers)
            r = c.getresponse()
            raw = r.read()
            status = r.status
            try:
                answer = json.loads(raw) if raw else None
            except ValueError:
                answer = None
            if r.getheader("connection", "").lower() == "close":
                self._drop()
        except TimeoutError:
            status, error = "timeout", "timeout"
            self._drop()
        except OSError as e:  # refused, reset, unreachable
            status, error = "error", type(e).__name__
            self._drop()
        except http.client.HTTPException as e:
            status, error = "error", type(e).__name__
            self._drop()
        t1 = time.time()
        record = {"t0": t0, "t1": t1, "server": self.server, "agent": self.agent, "op": op,
                  "status": status, "attempt": attempt}
        if isinstance(answer, dict) and isinstance(status, int) and status >= 400:
            record["code"] = answer.get("code")
        if error:
            record["error"] = error
        if extra:
            record.update(extra)
        return status, answer, record


def digest(text):
    return hashlib.sha256(text.encode()).hexdigest()


def control(path):
    return os.path.exists(path)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--agents", required=True, help="agents.json: {name: {token, id}}")
    p.add_argument("--servers", required=True, help="s1=URL,s2=URL")
    p.add_argument("--pin", required=True, help="agent=server,… (which server each agent talks to)")
    p.add_argument("--senders", required=True, help="agent,… that send")
    p.add_argument("--out", required=True)
    p.add_argument("--control", required=True)
    p.add_argument("--seed", type=int, default=20)
    p.add_argument("--interval", type=float, default=0.15, help="seconds between one sender's sends")
    a = p.parse_args()

    agents = json.load(open(a.agents))
    servers = dict(kv.split("=", 1) for kv in a.servers.split(","))
    pin = dict(kv.split("=", 1) for kv in a.pin.split(","))
    senders = a.senders.split(",")
    rec = Recorder(a.out)
    clients = {n: Client(n, agents[n]["token"], pin[n], servers[pin[n]], rec) for n in agents}
    ctl = lambda name: os.path.join(a.control, name)
    failures = []

    def must(status, answer, record, what):
        rec.write("requests.jsonl", record)
        if not (isinstance(status, int) and 200 <= status < 300):
            failures.append(f"{what}: {status} {answer}")
            raise SystemExit(f"load: {what} failed during set-up: {status} {answer}")
        return answer

    # --- set-up (before the nemesis starts): conversations and runs ---------------------------
    first = senders[0]
    everyone = sorted(agents)
    active = [n for n in everyone if n != "rv"]
    plan = [("c1", everyone), ("c2", active), ("c3", everyone), ("c4", active)]
    conversations = {}
    for title, members in plan:
        ans = must(*clients[first].call("POST", "/v1/conversations",
                                        {"title": title, "members": members}, op="create_conversation"),
                   f"create conversation {title}")
        conversations[title] = {"id": ans["id"], "members": members}
    json.dump(conversations, open(os.path.join(a.out, "conversations.json"), "w"))
    runs = {}
    for n in everyone:
        ans = must(*clients[n].call("POST", "/v1/runs", {}, op="start_run"), f"start run of {n}")
        runs[n] = ans["id"]
        rec.write("runs.jsonl", {"agent": n, "run": ans["id"]})
    open(ctl("ready"), "w").close()

    # --- senders ------------------------------------------------------------------------------
    def sender(name, rnd):
        c = clients[name]
        mine = [conversations[t]["id"] for t, m in plan if name in m]
        n = 0
        while not control(ctl("stop-sending")):
            n += 1
            conv = rnd.choice(mine)
            request_id = f"{name}-{n}"
            size = rnd.randint(64, 1500)
            body = f"{request_id} " + "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(size))
            dg = digest(body)
            attempt, delay = 0, 0.05
            stop_at = None
            while True:
                attempt += 1
                status, ans, r = c.call("POST", f"/v1/conversations/{conv}/messages",
                                        {"request_id": request_id, "body": body, "run": runs[name]},
                                        timeout=5.0, op="send", attempt=attempt,
                                        extra={"conversation": conv, "request_id": request_id, "digest": dg})
                if isinstance(status, int) and status in (200, 201) and isinstance(ans, dict):
                    r["message"] = ans["message"]["id"]
                    r["seq"] = ans["message"]["seq"]
                    r["created"] = ans.get("created")
                    rec.write("requests.jsonl", r)
                    break
                rec.write("requests.jsonl", r)
                if isinstance(status, int) and status not in RETRYABLE:
                    failures.append(f"send {request_id}: {status} {ans}")
                    break
                # Retry the same request id and body, as a client does, until answered; after
                # stop-sending at most 90 s more (then the send is left unanswered, recorded).
                if control(ctl("stop-sending")):
                    stop_at = stop_at or time.time() + 90
                    if time.time() > stop_at:
                        rec.write("requests.jsonl", {"t0": time.time(), "t1": time.time(), "agent": name,
                                                     "server": c.server, "op": "send_abandoned",
                                                     "status": "abandoned", "request_id": request_id,
                                                     "conversation": conv, "digest": dg, "attempt": attempt})
                        break
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
            time.sleep(a.interval * rnd.uniform(0.5, 1.5))

    # --- receivers ----------------------------------------------------------------------------
    def receiver(name, rnd):
        c = clients[name]
        held = []          # delivery ids to confirm
        skipped = set()    # messages left unconfirmed once (they come back redelivered)
        revoked = False
        while True:
            stopping = control(ctl("stop-receiving"))
            if stopping and not held:
                break
            if held:
                batch = held[:]
                status, ans, r = c.call("POST", "/v1/inbox/confirm",
                                        {"deliveries": batch, "run": runs[name]}, timeout=5.0,
                                        op="confirm", extra={"deliveries": len(batch)})
                rec.write("requests.jsonl", r)
                if status == 200 and isinstance(ans, dict):
                    for item in ans.get("results", []):
                        rec.write("confirms.jsonl", {"t0": r["t0"], "t1": r["t1"], "agent": name,
                                                     "server": c.server,
                                                     "delivery_id": item["delivery_id"],
                                                     "message": item.get("message"),
                                                     "outcome": item["outcome"]})
                    held = []
                elif status == 401:
                    revoked = True
                    held = []
                else:
                    time.sleep(0.1)
                continue
            if stopping:
                continue
            if revoked:
                # A revoked agent keeps asking (every 0.5 s): anything handed to it now is a
                # finding of the checker.
                time.sleep(0.5)
            status, ans, r = c.call("POST", "/v1/inbox/fetch", {"limit": 50, "wait_ms": 1000},
                                    timeout=6.0, op="fetch")
            if status == 200 and isinstance(ans, dict):
                r["handed"] = len(ans.get("deliveries", []))
                rec.write("requests.jsonl", r)
                for d in ans.get("deliveries", []):
                    m = d["message"]
                    rec.write("deliveries.jsonl", {
                        "t0": r["t0"], "t1": r["t1"], "agent": name, "server": c.server,
                        "delivery_id": d["delivery_id"], "message": m["id"],
                        "conversation": m["conversation"], "seq": m["seq"],
                        "redelivered": d["redelivered"], "digest": digest(d["body"]),
                        "truncated": d.get("truncated", False)})
                    if m["id"] not in skipped and rnd.random() < 0.03:
                        skipped.add(m["id"])  # not confirmed this time: handed out again later
                        continue
                    held.append(d["delivery_id"])
            else:
                rec.write("requests.jsonl", r)
                if status == 401:
                    revoked = True
                elif not isinstance(status, int) or status >= 500:
                    time.sleep(0.1)

    rnd = random.Random(a.seed)
    threads = []
    for n in senders:
        threads.append(("send", threading.Thread(target=sender, args=(n, random.Random(rnd.random())), daemon=True)))
    for n in everyone:
        threads.append(("recv", threading.Thread(target=receiver, args=(n, random.Random(rnd.random())), daemon=True)))
    for _, t in threads:
        t.start()
    for kind, t in threads:
        if kind == "send":
            t.join()
    open(ctl("sent-done"), "w").close()
    for kind, t in threads:
        if kind == "recv":
            t.join()

    # --- seal the runs (retried until answered; 409 after a lost answer means sealed) ---------
    for n in everyone:
        if n == "rv":
            continue  # revoked: its calls are 401, its run stays open
        deadline = time.time() + 60
        while True:
            status, ans, r = clients[n].call("POST", f"/v1/runs/{runs[n]}/seal",
                                             {"outcome": "succeeded", "reason": "partition test done"},
                                             op="seal")
            rec.write("requests.jsonl", r)
            if status in (200, 409):
                break
            if time.time() > deadline:
                failures.append(f"seal of {n}'s run: {status}")
                break
            time.sleep(0.2)
    open(ctl("sealed"), "w").close()
    rec.close()
    if failures:
        print("load: " + "\n  ".join(failures), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
