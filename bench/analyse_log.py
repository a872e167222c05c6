#!/usr/bin/env python3
"""Reads the PostgreSQL server log of a capture pass (log_statement = all) and prints the
round trips per request of each phase; writes the SQL of one first execution as a pgbench
script (same_sql.sql), with the key and the order id made unique per transaction.

Usage: analyse_log.py PG_LOG DATABASE OUT_DIR
"""
import json
import re
import sys

log_path, database, out_dir = sys.argv[1:4]
line_re = re.compile(r"\[(\d+)\] \S*@(\S+) (LOG|DETAIL):  (.*)$")
entries = []  # (pid, kind, sql, params)
with open(log_path, encoding="utf-8", errors="replace") as log:
    for raw in log:
        m = line_re.search(raw.rstrip("\n"))
        if not m or m.group(2) != database:
            continue
        pid, level, text = m.group(1), m.group(3), m.group(4)
        if level == "LOG":
            s = re.match(r"(statement|execute [^:]+): (.*)", text)
            if s:
                entries.append({"pid": pid, "sql": s.group(2), "params": {}})
        elif level == "DETAIL" and text.startswith("parameters: ") and entries:
            params = {}
            for p in re.finditer(r"\$(\d+) = ('(?:[^']|'')*'|NULL)", text):
                params[int(p.group(1))] = p.group(2)
            entries[-1]["params"] = params

phases, current = {}, None
for e in entries:
    mark = re.search(r"idem-bench-mark:(\w+)-(start|end)", e["sql"])
    if mark:
        current = mark.group(1) if mark.group(2) == "start" else None
        if current:
            phases[current] = []
        continue
    if current:
        phases[current].append(e)

requests = int(sys.argv[4]) if len(sys.argv) > 4 else 20
round_trips = {name: len(stmts) / requests for name, stmts in phases.items()}
print(json.dumps({"round_trips": round_trips}))

# One first execution: the last group that starts with the key lookup, or with BEGIN and the
# key's lock where the lock came first (an operation whose keys were new).
fresh = phases.get("fresh", [])
lookup = [e["sql"].startswith("SELECT fingerprint") for e in fresh]
starts = [
    i
    for i, e in enumerate(fresh)
    if lookup[i] or (e["sql"].startswith("BEGIN") and not (i > 0 and lookup[i - 1]))
]
one = fresh[starts[-1]:] if starts else []
# The merged `INSERT …; COMMIT; BEGIN` leaves an empty transaction whose `ROLLBACK` goes out
# with the connection's next statement (the next execution's `BEGIN`, in the same round
# trip). pgbench cannot end a script inside a transaction: the script stops at the `COMMIT`
# and leaves that empty transaction (two statements of no work) out.
one = [e for e in one if e["sql"] != "ROLLBACK"]
for e in one:
    if e["sql"].endswith("; COMMIT; BEGIN"):
        e["sql"] = e["sql"][: -len("; BEGIN")]
uuid_re = re.compile(r"'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}'")
lines = [
    "-- The SQL the runtime issued for one first execution of POST /orders, captured from",
    "-- the server log by bench/run; the key and the order id are made unique per transaction.",
    "\\set k random(1, 9000000000000000000)",
]
for e in one:
    sql = e["sql"]
    for n in sorted(e["params"], reverse=True):
        value = e["params"][n]
        sql = sql.replace(f"${n}", value)
    sql = re.sub(r"'cap-\d+'", "('bench-' || :k)", sql)
    # The merged INSERT writes its text as hexadecimal escapes (E'\x63\x61…'): the key too.
    sql = re.sub(
        r"E'((?:\\x[0-9a-f]{2})*)'",
        lambda m: "('bench-' || :k)"
        if re.fullmatch(r"cap-\d+", bytes.fromhex(m.group(1).replace("\\x", "")).decode("utf-8", "replace"))
        else m.group(0),
        sql,
    )
    # The key's advisory lock: one per transaction, as one per key.
    sql = re.sub(r"pg_advisory_xact_lock\(-?\d+\)", "pg_advisory_xact_lock(:k)", sql)
    sql = re.sub(r"idem_lock_key\(-?\d+,", "idem_lock_key(:k,", sql)
    sql = uuid_re.sub("gen_random_uuid()::text", sql)
    sql = sql.replace("; ", " \\; ")  # one round trip, as the runtime sends it
    lines.append(sql + ";")
with open(f"{out_dir}/same_sql.sql", "w", encoding="utf-8") as out:
    out.write("\n".join(lines) + "\n")
print(json.dumps({"same_sql_statements": len(one)}))
