#!/usr/bin/env python3
"""Reads one callgrind dump of bench/callgrind: instructions per request, by function.

Usage: callgrind_report.py CALLGRIND_FILE WRK_OUTPUT PHASE [TOP]

Self cost per function (the instructions spent in its own code), divided by the requests wrk
counted, and the callers of memcpy with what they copy (moves of large futures show there).
"""
import collections
import json
import re
import sys

path, wrk_output, phase = sys.argv[1], sys.argv[2], sys.argv[3]
top = int(sys.argv[4]) if len(sys.argv) > 4 else 25
summary = open(wrk_output).read().split("BENCH ", 1)[1].splitlines()[0]
requests = max(json.loads(summary)["requests"], 1)

names = {}


def name(token):
    """callgrind compresses names: `(12) name` the first time, `(12)` after."""
    match = re.match(r"\((\d+)\)(?: (.*))?", token)
    if not match:
        return token
    if match.group(2):
        names[match.group(1)] = match.group(2)
    return names.get(match.group(1), token)


own = collections.Counter()
memcpy_callers = collections.Counter()
function = callee = None
after_calls = False
for line in open(path, errors="replace"):
    line = line.rstrip("\n")
    if line.startswith("fn="):
        function = name(line[3:])
    elif line.startswith("cfn="):
        callee = name(line[4:])
    elif line.startswith("calls="):
        after_calls = True
    elif line[:1].isdigit() or line[:1] in "+-*":
        parts = line.split()
        if len(parts) < 2:
            continue
        cost = int(parts[1])
        if after_calls:
            after_calls = False
            if callee and "memcpy" in callee:
                memcpy_callers[function] += cost
        elif function:
            own[function] += cost

total = sum(own.values())
print(f"\n## {phase}: {total / requests:,.0f} instructions per request ({requests} requests)\n")
print("| instructions/request | share | function (self cost) |\n|---:|---:|---|")
for function, cost in own.most_common(top):
    print(f"| {cost / requests:,.0f} | {100 * cost / total:.1f} % | `{function[:140]}` |")
print("\n| memcpy instructions/request | called from |\n|---:|---|")
for function, cost in memcpy_callers.most_common(8):
    print(f"| {cost / requests:,.0f} | `{function[:140]}` |")
